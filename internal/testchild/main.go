// Command testchild is the process mariposa's end-to-end tests supervise. It
// does only what its flags ask, and reports what it saw into files.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	var (
		httpAddr   = flag.String("http", "", "serve HTTP on this address (503 while -unhealthy-file exists)")
		unhealthy  = flag.String("unhealthy-file", "", "answer 503 while this file exists")
		envFile    = flag.String("env-file", "", "write the environment here at start")
		stampFile  = flag.String("stamp-file", "", "append 'start|stop PID MONOTONIC_NS' lines here (CLOCK_MONOTONIC, shared with the harness)")
		exitAfter  = flag.Duration("exit-after", 0, "exit after this long")
		exitCode   = flag.Int("exit-code", 0, "with -exit-after: the exit status")
		ignoreTerm = flag.Bool("ignore-term", false, "ignore SIGTERM")
		grandkids  = flag.Int("grandchildren", 0, "start this many `sleep` grandchildren in our process group")
		pidsFile   = flag.String("pids-file", "", "write our PID and the grandchildren's PIDs here")
	)
	flag.Parse()
	// Handlers first: a signal that arrives early must not take the
	// default action (the "started" line below promises they are set).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	stamp := func(what string) {
		if *stampFile == "" {
			return
		}
		f, err := os.OpenFile(*stampFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s %d %d\n", what, os.Getpid(), monotonicNanos())
			f.Close()
		}
	}
	stamp("start")
	fmt.Printf("testchild %d started\n", os.Getpid())
	if *envFile != "" {
		_ = os.WriteFile(*envFile+".tmp", []byte(strings.Join(os.Environ(), "\n")+"\n"), 0o644)
		_ = os.Rename(*envFile+".tmp", *envFile)
	}
	pids := []string{fmt.Sprint(os.Getpid())}
	for i := 0; i < *grandkids; i++ {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err == nil {
			pids = append(pids, fmt.Sprint(c.Process.Pid))
		}
	}
	if *pidsFile != "" {
		_ = os.WriteFile(*pidsFile+".tmp", []byte(strings.Join(pids, "\n")+"\n"), 0o644)
		_ = os.Rename(*pidsFile+".tmp", *pidsFile)
	}
	if *httpAddr != "" {
		go func() {
			err := http.ListenAndServe(*httpAddr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if *unhealthy != "" {
					if _, err := os.Stat(*unhealthy); err == nil {
						http.Error(w, "unhealthy", http.StatusServiceUnavailable)
						return
					}
				}
				fmt.Fprintf(w, "ok %d\n", os.Getpid())
			}))
			fmt.Fprintln(os.Stderr, "http:", err)
			os.Exit(3)
		}()
	}
	var exit <-chan time.Time
	if *exitAfter > 0 {
		exit = time.After(*exitAfter)
	}
	for {
		select {
		case <-exit:
			stamp("stop")
			os.Exit(*exitCode)
		case s := <-sigs:
			fmt.Printf("testchild %d got %s\n", os.Getpid(), s)
			if s == syscall.SIGTERM && *ignoreTerm {
				continue
			}
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				stamp("stop")
				os.Exit(0)
			}
		}
	}
}

// monotonicNanos reads CLOCK_MONOTONIC, the clock the benchmark harness uses
// too, so start and exit times compare across processes.
func monotonicNanos() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
