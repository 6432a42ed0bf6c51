// Package supervisor runs services on one node: it starts each process,
// restarts it on exit and on failing health, gates it on its dependencies
// and templates, runs it only while it leads when it is a standby, and stops
// everything cleanly.
//
// Each service is an Instance. Its decisions are one pure function,
// decide(state, input, now) -> (state, actions), in decide.go (in the manner
// of etcd's raft: Step, then Ready); the instance's loop (instance.go) is the
// only place that acts. Nothing blocks the loop: stopping a process is an
// action whose completion (the process's exit) comes back as an input, so a
// second SIGINT, an expired leadership term or an operator's request is
// served at any time. One answer is given in advance (restartAtOnce): the
// running process's exit, when decide would answer any such exit by a start
// at once; the loop arms the process with it (proc.Process.Arm), the main
// thread forks the successor at the exit, and the exit and the start come
// back as the usual inputs; any other input holds the arm first, so the
// answer holds until the exit. Whether to run is one function over a set of permits
// (permitted): not stopping, leading (standby mode), dependencies and
// templates ready; the fleet's slot, version and pause will be more permits.
//
// The states of an instance (the supervisor check's output names them, and
// carries them as data: internal/report):
//
//	                boot (standby: not registered until it leads)
//	                  |
//	   +---------> starting <-------------------------------+
//	   |              |   \ permits missing                  |
//	   |              |    `-----------> waiting ------------+ data changes
//	   |        start |                    | dependency timeout,
//	   |              v                    | template cannot parse
//	   |           running                 v
//	   |           |  |  \              failed <--+
//	   |      exit |  |   \ check critical,       | restarts exhausted,
//	   |           |  |    \ template/role change,| start error under
//	   |           |  |     \ operator restart    | policy never
//	   |           |  |      `-> (stopping the process) --> starting
//	   |           v  |
//	   +------- backoff --(restart policy)--> completed
//	  timer                                   (on-failure: exit 0; never)
//
//	standby <-> starting: leadership gained; any state -> standby: lost
//	any state -> stopping -> stopped: Stop (deregister, drain, signal,
//	SIGKILL after the timeout; Kill skips the wait; without a drain the
//	signal goes with the deregistration; a leader's term goes back once
//	the process is gone, its release withdrawing the registration if the
//	deregistration has not returned, even though its election ends first)
//
// A template with a coordinate block does not restart or signal its
// instance at once after a change: the instance asks for a reload token
// (a Consul semaphore shared by every instance that rendered the same
// content: Options.ReloadGate), acts once it has one, and gives it back
// once it runs again with its checks passing (reload.go).
//
// Outside the instances, the Runner holds the configuration, the registry
// (checks.Registry), the shared Consul data (render.Manager) and the health
// watch, and applies new configurations (Apply).
package supervisor
