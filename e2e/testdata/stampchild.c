/* The tiny child of the latency benchmarks, in C so that its own start-up
 * adds as little as possible to what is measured. Same contract as main.go:
 * $STAMP_FILE gets "start PID NS" and "stop PID NS" (CLOCK_MONOTONIC),
 * $STAMP_SLEEP_MS (negative: forever), exit status $STAMP_EXIT. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void stamp(const char *file, const char *what) {
	struct timespec ts;
	char line[96];
	int fd, n;
	if (!file || !*file) return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(line, sizeof line, "%s %d %lld\n", what, (int)getpid(),
		(long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
	fd = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0) return;
	if (write(fd, line, n) < 0) {}
	close(fd);
}

int main(void) {
	const char *file = getenv("STAMP_FILE");
	const char *ms_s = getenv("STAMP_SLEEP_MS");
	const char *code_s = getenv("STAMP_EXIT");
	long ms = ms_s ? atol(ms_s) : 0;
	stamp(file, "start");
	if (ms < 0) for (;;) pause();
	struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&d, NULL);
	stamp(file, "stop");
	return code_s ? atoi(code_s) : 0;
}
