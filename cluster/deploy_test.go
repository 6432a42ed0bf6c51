package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mariposa-sh/mariposa/internal/consultest"
	"github.com/mariposa-sh/mariposa/schema"
)

// TestConcurrentDeploys: deploys of different specs racing on one
// deployment: exactly one wins (a deploy that comes after the winner
// finds it running and needs -force), and a loser's error says where the
// deployment is now; desired, the specs, the state and the audit agree.
func TestConcurrentDeploys(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	const racers = 6
	var mu sync.Mutex
	won, lost := 0, 0
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sp := &Spec{Format: SpecFormat, Name: "shop", Hash: fmt.Sprintf("h%d", i),
				Services: []*schema.Service{{Name: "api", Command: []string{"x"}, Placement: &schema.Placement{Count: i + 1}}}}
			_, err := Deploy(c, sp, DeployOptions{By: "test"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrConcurrentDeploy) && (strings.HasPrefix(err.Error(), "deployment shop is at spec ") ||
				strings.HasPrefix(err.Error(), "deployment shop is moving to spec ")):
				lost++
			case errors.Is(err, ErrInProgress) && strings.HasPrefix(err.Error(), "deployment shop/1 in progress ("):
				lost++
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	sp, err := DesiredSpec(c, "shop")
	if err != nil || sp == nil {
		t.Fatalf("desired: %v", err)
	}
	audits, _, _ := c.KV().List(AuditPrefix, nil)
	specs, _, _ := c.KV().Keys(DeployPrefix+"shop/spec/", "", nil)
	st, err := ReadDeployState(c, "shop", 1)
	if err != nil || st == nil || st.Status != DeployRunning || st.Hash != sp.Hash {
		t.Fatalf("state of spec 1: %+v, %v", st, err)
	}
	if won != 1 || won+lost != racers || int(sp.N) != won || len(audits) != won || len(specs) != won {
		t.Fatalf("%d won, %d lost; desired spec %d, %d audit records, %d specs", won, lost, sp.N, len(audits), len(specs))
	}
	t.Logf("%d of %d concurrent deploys won", won, racers)
}
