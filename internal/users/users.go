// Package users resolves the user and group a service runs as, the way
// login would: the user's primary group unless a group is given, its
// supplementary groups from /etc/group, its home directory. It uses
// os/user, which reads /etc/passwd and /etc/group itself in a static
// (CGO_ENABLED=0) build: no NSS modules (LDAP, sssd) are consulted there;
// numeric ids work whether or not a name is known for them.
package users

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// Identity is who a process runs as.
type Identity struct {
	Uid, Gid uint32
	Groups   []uint32 // supplementary groups
	Name     string   // USER and LOGNAME
	Home     string   // HOME
}

// Resolve finds the identity of userSpec and groupSpec (names or numeric
// ids; either may be ""). A user without a group runs with its primary
// group; a group alone changes the group of mariposa's own user.
func Resolve(userSpec, groupSpec string) (*Identity, error) {
	id := &Identity{}
	var u *user.User
	var err error
	if userSpec == "" {
		u, err = user.Current()
		if err != nil {
			return nil, err
		}
	} else if _, perr := strconv.ParseUint(userSpec, 10, 32); perr == nil {
		u, err = user.LookupId(userSpec)
		if err != nil {
			var unk user.UnknownUserIdError
			if !errors.As(err, &unk) {
				return nil, err
			}
			// A numeric id without a name: systemd allows it, and so does
			// every container runtime.
			u = &user.User{Uid: userSpec, Gid: userSpec, Username: userSpec, HomeDir: "/"}
		}
	} else {
		u, err = user.Lookup(userSpec)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", userSpec, err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q", userSpec, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q", userSpec, u.Gid)
	}
	id.Uid, id.Gid, id.Name, id.Home = uint32(uid), uint32(gid), u.Username, u.HomeDir
	if id.Home == "" {
		id.Home = "/"
	}
	if userSpec != "" {
		if gids, err := u.GroupIds(); err == nil {
			for _, g := range gids {
				if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != id.Gid {
					id.Groups = append(id.Groups, uint32(n))
				}
			}
		}
	}
	if groupSpec != "" {
		g, err := LookupGroup(groupSpec)
		if err != nil {
			return nil, err
		}
		id.Gid = g
	}
	return id, nil
}

// LookupGroup returns the id of a group name or numeric id.
func LookupGroup(spec string) (uint32, error) {
	if n, err := strconv.ParseUint(spec, 10, 32); err == nil {
		return uint32(n), nil
	}
	g, err := user.LookupGroup(spec)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", spec, err)
	}
	n, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("group %q: gid %q", spec, g.Gid)
	}
	return uint32(n), nil
}

// Env returns env with HOME, USER and LOGNAME set for id, as login sets
// them.
func (id *Identity) Env(env []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != "HOME" && k != "USER" && k != "LOGNAME" {
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+id.Home, "USER="+id.Name, "LOGNAME="+id.Name)
}

// Capability bits of /proc/self/status's CapEff.
const (
	capChown  = 0
	capSetgid = 6
	capSetuid = 7
)

// CanSwitch says whether this process can run children as other users:
// nil as root or with CAP_SETUID and CAP_SETGID, else why not.
func CanSwitch() error {
	if os.Geteuid() == 0 {
		return nil
	}
	f, err := os.Open("/proc/self/status")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
				caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err == nil && caps&(1<<capSetuid) != 0 && caps&(1<<capSetgid) != 0 {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("mariposa runs as uid %d without CAP_SETUID and CAP_SETGID", os.Geteuid())
}

// CanChown says whether this process can give files to other users.
func CanChown() bool {
	if os.Geteuid() == 0 {
		return true
	}
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<capChown) != 0
		}
	}
	return false
}
