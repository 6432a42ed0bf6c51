package supervisor

import (
	"testing"

	"github.com/hashicorp/consul/api"
)

func TestWithHTTPAPI(t *testing.T) {
	for _, c := range []struct {
		addr, address, meta string
		port                int
	}{
		{"127.0.0.1:8585", "127.0.0.1", "http://127.0.0.1:8585", 8585},
		{"0.0.0.0:8585", "", "http://0.0.0.0:8585", 8585},
		{"[::]:9000", "", "http://[::]:9000", 9000},
		{"[::1]:9000", "::1", "http://[::1]:9000", 9000},
		{"10.1.2.3:8585", "10.1.2.3", "http://10.1.2.3:8585", 8585},
		{"", "", "", 0},
		{"nonsense", "", "", 0},
	} {
		reg := withHTTPAPI(c.addr, &api.AgentServiceRegistration{Name: "mariposa", Meta: map[string]string{"managed-by": "mariposa"}})
		if reg.Address != c.address || reg.Port != c.port || reg.Meta[HTTPAPIMetaKey] != c.meta || reg.Meta["managed-by"] != "mariposa" {
			t.Errorf("%q: address %q port %d meta %q", c.addr, reg.Address, reg.Port, reg.Meta[HTTPAPIMetaKey])
		}
	}
}
