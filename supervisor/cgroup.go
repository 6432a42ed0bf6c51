package supervisor

import (
	"fmt"

	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/internal/proc"
	"github.com/mariposa-sh/mariposa/internal/users"
	"github.com/mariposa-sh/mariposa/schema"
)

// runAs resolves who the service runs as and sets HOME, USER and LOGNAME in
// its environment as login would; nothing without user or group. The
// error, if any, fails each start (the user was deleted since the files
// were checked).
func (in *Instance) runAs() {
	if in.svc.User == "" && in.svc.UserGroup == "" {
		return
	}
	id, err := users.Resolve(in.svc.User, in.svc.UserGroup)
	if err != nil {
		in.identErr = fmt.Errorf("cannot run as user %q group %q: %w", in.svc.User, in.svc.UserGroup, err)
		return
	}
	in.cred = &proc.Credential{Uid: id.Uid, Gid: id.Gid, Groups: id.Groups}
	if in.svc.User != "" {
		in.env = id.Env(in.env)
	}
}

// resourcesOf is what the service's control group limits.
func resourcesOf(svc *schema.Service) cgroup.Resources {
	r := svc.Resources
	if r == nil {
		return cgroup.Resources{}
	}
	return cgroup.Resources{CPU: r.CPU, Memory: r.Memory, MemoryMax: r.MemoryMax, Pids: r.Pids}
}

// asService gives spec the service's user, no_new_privs and umask, and for
// its main process (main) its rlimits.
func (in *Instance) asService(spec *proc.Spec, main bool) {
	svc := in.svc
	spec.Cred = in.cred
	spec.NoNewPrivs = svc.NoNewPrivs
	if svc.Umask != nil {
		spec.Umask, spec.HasUmask = int(*svc.Umask), true
	}
	if main && svc.Limits != nil {
		for res, v := range map[int]*uint64{proc.RlimitNOFile: svc.Limits.NOFile, proc.RlimitNProc: svc.Limits.NProc, proc.RlimitCore: svc.Limits.Core} {
			if v != nil {
				spec.Rlimits = append(spec.Rlimits, proc.Rlimit{Resource: res, Value: *v})
			}
		}
	}
}
