/* The floor of a restart, for BenchmarkRestartAfterExit: runs the program
 * argv[2] (with argv[2..] as its arguments and this environment) argv[1]
 * times in a row, each started as soon as the last is reaped, with vfork,
 * execve and wait4 and nothing else: no pipe, no thread, no signal
 * handler, no process group. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
	int i, n, st;
	pid_t pid;
	if (argc < 3) return 2;
	n = atoi(argv[1]);
	for (i = 0; i < n; i++) {
		pid = vfork();
		if (pid == 0) {
			execve(argv[2], argv + 2, environ);
			_exit(127);
		}
		if (pid < 0) return 1;
		while (wait4(pid, &st, 0, NULL) < 0 && errno == EINTR) {
		}
	}
	return 0;
}
