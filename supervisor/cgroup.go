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
	return cgroup.Resources{}
}
