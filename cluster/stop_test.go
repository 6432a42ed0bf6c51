package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/mariposa-sh/mariposa/internal/consultest"
)

// A unit's name is unique across deployments: deploying it under another
// name is refused before anything is written, naming the owner. A stop
// makes the empty spec desired (cancelling a running one); a purge waits
// for the units' slots to be released (refusing after its wait, with the
// slots named), then deletes the deployment's records and the slot keys,
// leaving the units of other deployments alone; a deployment that runs
// units is not purged.
func TestOwnershipStopPurge(t *testing.T) {
	c := consultest.NewDev(t).Client(t)
	shop := depSpec(0, "v1", 2, 0, false)
	if _, err := Deploy(c, shop, DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	keys := func(prefix string) []string {
		ks, _, err := c.KV().Keys(prefix, "", &api.QueryOptions{RequireConsistent: true})
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	before := strings.Join(keys(Prefix), " ")
	other := depSpec(0, "v1", 2, 0, false)
	other.Name = "other"
	var owned *OwnedError
	if _, err := Deploy(c, other, DeployOptions{By: "test"}); !errors.As(err, &owned) || owned.Owner != "shop" || owned.Unit != "web" ||
		!strings.Contains(err.Error(), `"web" belongs to deployment "shop" (spec 1)`) {
		t.Fatalf("deploying shop's unit as other: %v", err)
	}
	if after := strings.Join(keys(Prefix), " "); after != before {
		t.Fatalf("a refused deploy wrote keys:\n%s\nwas\n%s", after, before)
	}

	// A held slot of web, and a slot of a unit another deployment runs.
	sess, _, err := c.Session().Create(&api.SessionEntry{TTL: "60s", Behavior: "release"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.KV().Acquire(&api.KVPair{Key: SlotKey("web", 0), Value: SlotValue{Node: "n1", State: SlotHeld}.encode(), Session: sess}, nil); !ok || err != nil {
		t.Fatal(ok, err)
	}
	db := depSpec(0, "v1", 1, 0, false)
	db.Name, db.Services[0].Name = "db", "db"
	if _, err := Deploy(c, db, DeployOptions{By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KV().Put(&api.KVPair{Key: SlotKey("db", 0), Value: SlotValue{Node: "n1", State: SlotReleased}.encode()}, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := PurgeDeployment(context.Background(), c, "shop", "test", time.Second); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("purge of a running deployment: %v", err)
	}
	res, err := StopDeployment(c, "shop", "test")
	if err != nil || res.N != 2 || res.Superseded != 1 || len(res.Units) != 1 || res.Units[0] != "web" {
		t.Fatalf("stop: %+v %v", res, err)
	}
	if sp, _ := DesiredSpec(c, "shop"); sp == nil || len(sp.Units()) != 0 {
		t.Fatalf("desired after the stop: %+v", sp)
	}
	if st, _ := ReadDeployState(c, "shop", 1); st == nil || st.Status != DeployCancelled || !strings.Contains(st.Reason, "stopped by test") {
		t.Fatalf("spec 1 after the stop: %+v", st)
	}
	if ks := keys(RecordKey("web")); len(ks) != 0 || len(keys(RecordKey("db"))) != 1 {
		t.Fatalf("records after the stop: web's %v (want none), db's %v (another deployment's)", ks, keys(RecordKey("db")))
	}
	// A status left under the unit's prefix (its holder's session gone).
	if _, err := c.KV().Put(&api.KVPair{Key: UnitStatusKey("web", 0), Value: []byte(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if again, err := StopDeployment(c, "shop", "test"); err != nil || !again.AlreadyStopped {
		t.Fatalf("a second stop: %+v %v", again, err)
	}
	// The slot is still held: the purge waits, then says which.
	pr, err := PurgeDeployment(context.Background(), c, "shop", "test", 500*time.Millisecond)
	if err == nil || len(pr.Remaining) != 1 || pr.Remaining[0] != "web/0" || !strings.Contains(err.Error(), "web/0") {
		t.Fatalf("purge with a held slot: %+v %v", pr, err)
	}
	if len(keys(DeployPrefix+"shop/")) == 0 {
		t.Fatal("a refused purge deleted the records")
	}
	// Its holder releases it, most likely during the wait; released
	// before the purge looks, the purge passes the same way (no race on
	// the outcome: the delay only picks the path).
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _, _ = c.KV().Release(&api.KVPair{Key: SlotKey("web", 0), Value: SlotValue{Node: "n1", State: SlotReleased}.encode(), Session: sess}, nil)
	}()
	pr, err = PurgeDeployment(context.Background(), c, "shop", "test", 30*time.Second)
	if err != nil || pr.SlotKeys != 1 || len(pr.Units) != 1 {
		t.Fatalf("purge: %+v %v", pr, err)
	}
	if ks := keys(DeployPrefix + "shop/"); len(ks) != 0 {
		t.Errorf("records left: %v", ks)
	}
	if ks := keys(UnitDeployPrefix("web")); len(ks) != 0 {
		t.Errorf("web's deployment keys left: %v", ks)
	}
	if ks := keys(SlotsPrefix + "web/"); len(ks) != 0 {
		t.Errorf("web's slot keys left: %v", ks)
	}
	if ks := keys(SlotsPrefix + "db/"); len(ks) != 1 {
		t.Errorf("db's slot keys (another deployment's): %v", ks)
	}
	if ks := keys(DeployPrefix + "db/"); len(ks) == 0 {
		t.Error("db's records went with shop's")
	}
	if _, err := StopDeployment(c, "shop", "test"); !errors.Is(err, ErrNoDeployment) {
		t.Errorf("stop of a purged deployment: %v", err)
	}
	// The name is free: other may deploy web now.
	if _, err := Deploy(c, other, DeployOptions{By: "test"}); err != nil {
		t.Errorf("web under other after the purge: %v", err)
	}
}
