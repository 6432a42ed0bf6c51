//go:build linux

// Command stampchild is the tiny child of the latency benchmarks: it appends
// "start PID NS" to the file named by $STAMP_FILE (CLOCK_MONOTONIC), sleeps
// $STAMP_SLEEP_MS milliseconds, appends "stop PID NS" and exits with
// $STAMP_EXIT. It imports next to nothing so its own start-up adds little to
// what is measured.
package main

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

func now() int64 {
	var ts syscall.Timespec
	// CLOCK_MONOTONIC = 1
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func stamp(f string, what string) {
	if f == "" {
		return
	}
	line := what + " " + strconv.Itoa(os.Getpid()) + " " + strconv.FormatInt(now(), 10) + "\n"
	fd, err := syscall.Open(f, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_APPEND, 0o644)
	if err != nil {
		return
	}
	syscall.Write(fd, []byte(line))
	syscall.Close(fd)
}

func main() {
	f := os.Getenv("STAMP_FILE")
	stamp(f, "start")
	ms, _ := strconv.Atoi(os.Getenv("STAMP_SLEEP_MS"))
	if ms < 0 {
		// Negative: run until killed.
		for {
			syscall.Nanosleep(&syscall.Timespec{Sec: 3600}, nil)
		}
	}
	ts := syscall.NsecToTimespec(int64(ms) * 1e6)
	syscall.Nanosleep(&ts, nil)
	code, _ := strconv.Atoi(os.Getenv("STAMP_EXIT"))
	stamp(f, "stop")
	os.Exit(code)
}
