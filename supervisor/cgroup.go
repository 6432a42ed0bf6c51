package supervisor

import (
	"github.com/mariposa-sh/mariposa/internal/cgroup"
	"github.com/mariposa-sh/mariposa/schema"
)

// resourcesOf is what the service's control group limits.
func resourcesOf(svc *schema.Service) cgroup.Resources {
	return cgroup.Resources{}
}
