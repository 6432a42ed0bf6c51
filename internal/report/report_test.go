package report

import (
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	since := time.Date(2026, 11, 23, 7, 1, 18, 0, time.UTC)
	cases := []Instance{
		{State: "running", PID: 4242, Restarts: 2, Reason: "running (pid 4242)", Version: "1.4.2", Role: "leader", Since: since},
		{State: "backoff", Reason: "restarting at 07:01:18 after exit 1", Since: since, Until: since.Add(time.Minute), LastExit: "exit 1", Stderr: "bind: Address already in use"},
		{State: "failed", Reason: "line one\nline two", Since: since},
	}
	for _, in := range cases {
		out := Encode(in)
		got, ok := Decode(out)
		if !ok {
			t.Fatalf("Decode(%q) found no state", out)
		}
		if got != in {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, in)
		}
		if Human(out) != in.Reason {
			t.Errorf("Human = %q, want %q", Human(out), in.Reason)
		}
	}
}

func TestDecodeForeign(t *testing.T) {
	for _, out := range []string{
		"", "running (pid 1)", "TTL expired", Prefix, Prefix + "{", Prefix + "{}", "x " + Prefix + `{"state":"running"}`,
		"\n\n" + Prefix + `{"state":1}`, "\n\n" + Prefix + `{"state":"running","pid":"x"}`,
	} {
		if i, ok := Decode(out); ok {
			t.Errorf("Decode(%q) = %+v, want none", out, i)
		}
	}
}

func TestEncodeBounded(t *testing.T) {
	in := Instance{State: "failed", Reason: strings.Repeat("é", 3000), Stderr: strings.Repeat("x", 5000)}
	out := Encode(in)
	if len(out) > maxOutput+64 {
		t.Errorf("output is %d bytes", len(out))
	}
	got, ok := Decode(out)
	if !ok || got.State != "failed" {
		t.Fatalf("Decode of a bounded output: %+v %v", got, ok)
	}
	if !strings.HasSuffix(got.Reason, "…") || strings.ToValidUTF8(got.Reason, "?") != got.Reason {
		t.Errorf("reason not cut cleanly: %q...", got.Reason[:20])
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(Instance{State: "running", PID: 1, Since: time.Unix(0, 0).UTC()}))
	f.Add("running\n\n" + Prefix + `{"state":"x","since":"bogus"}`)
	f.Fuzz(func(t *testing.T, s string) {
		i, ok := Decode(s)
		if ok && i.State == "" {
			t.Fatal("ok without a state")
		}
		_ = Human(s)
	})
}
