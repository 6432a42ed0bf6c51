package schema

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// updateSrc is a service with count 3 and body in its update block.
func updateSrc(body string) string {
	return "service \"s\" {\n  command = [\"s\"]\n  count   = 3\n  update {\n    " + body + "\n  }\n}\n"
}

// TestUpdateDecoded: an update block reaches the model with Nomad's
// defaults for what it leaves out, and expressions work in it.
func TestUpdateDecoded(t *testing.T) {
	for _, tt := range []struct {
		body string
		want Update
	}{
		{``, defaultUpdate},
		{`max_parallel = 0`, func() Update { u := defaultUpdate; u.MaxParallel = 0; return u }()},
		{`progress_deadline = "0s"`, func() Update { u := defaultUpdate; u.ProgressDeadline = 0; return u }()},
		{"canary       = 3\n    auto_promote = true", func() Update { u := defaultUpdate; u.Canary, u.AutoPromote = 3, true; return u }()},
		{"min_healthy_time = \"0s\"\n    healthy_deadline = \"1s\"\n    progress_deadline = \"2s\"",
			func() Update {
				u := defaultUpdate
				u.MinHealthyTime, u.HealthyDeadline, u.ProgressDeadline = 0, time.Second, 2*time.Second
				return u
			}()},
		{"health_check = \"${var.hc}\"\n    max_parallel = var.n", func() Update {
			u := defaultUpdate
			u.HealthCheck, u.MaxParallel = UpdateManual, 3
			return u
		}()},
	} {
		src := "variable \"hc\" {\n  default = \"manual\"\n}\nvariable \"n\" {\n  default = \"3\"\n}\n" + updateSrc(tt.body)
		cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if cfg == nil || diags.Len() != 0 {
			t.Errorf("%q: %s", tt.body, diags.Error())
			continue
		}
		if got := cfg.Service("s").Placement.Update; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: Update = %+v, want %+v", tt.body, got, tt.want)
		}
	}

	// A group's update is on the Placement every member shares.
	cfg, diags := loadSrc(t, t.TempDir(), `group "g" {
  count = 2
  update {
    canary = 1
  }
  service "a" {
    command = ["a"]
  }
  service "b" {
    command = ["b"]
  }
}
`, LoadOptions{Environ: []string{}})
	if cfg == nil || diags.Len() != 0 {
		t.Fatalf("%s", diags.Error())
	}
	g := cfg.Groups[0].Placement
	if g == nil || g.Update.Canary != 1 || cfg.Service("a").Placement != g || cfg.Service("b").Placement != g {
		t.Errorf("group placement %+v, members %p %p", g, cfg.Service("a").Placement, cfg.Service("b").Placement)
	}
}

// TestUpdateDetails checks what the diagnostics of update say beyond their
// summaries (which testdata/invalid/update.hcl checks).
func TestUpdateDetails(t *testing.T) {
	for _, tt := range []struct {
		body string
		want []string
	}{
		{`health_check = "chekcs"`, []string{`use "checks", "running" or "manual". Did you mean "checks"?`}},
		{`health_check = "task_states"`, []string{`Nomad's "task_states" is "running" here`}},
		{`max_paralel = 1`, []string{`Did you mean "max_parallel"?`}},
		{`auto_revrt = true`, []string{`Did you mean "auto_revert"?`}},
		{`stagger = "30s"`, []string{`Nomad's stagger paces the updates of system jobs`}},
		{`max_parallel = -1`, []string{`max_parallel is how many instances of service "s" update at once, from 0 (every instance at once: no rolling update) to 10000; got -1.`}},
		{`canary = 10001`, []string{`from 0 (no canaries) to 10000; got 10001.`}},
		{`max_parallel = 1.5`, []string{`"max_parallel" must be a whole number, got 1.5.`}},
		{`min_healthy_time = 10`, []string{`a bare number is ambiguous. Write "10s" for seconds.`}},
		{`healthy_deadline = "0s"`, []string{`it must be more than zero (the default is "5m")`}},
		{`min_healthy_time = "5m"`, []string{`min_healthy_time (5m0s) before healthy_deadline, which defaults to 5m0s, passes; raise healthy_deadline too.`}},
		{"min_healthy_time = \"1m\"\n    healthy_deadline = \"30s\"", []string{`min_healthy_time (1m0s) before healthy_deadline (30s) passes: healthy_deadline must be longer than min_healthy_time.`}},
		{`healthy_deadline = "10m"`, []string{`progress_deadline, which defaults to 10m0s`, `or set it to "0s" to fail the deployment at the first unhealthy instance`}},
		{`progress_deadline = "5m"`, []string{`progress_deadline (5m0s), and an updated instance has healthy_deadline (5m0s)`, `or "0s" to fail the deployment`}},
		{`auto_promote = true`, []string{`canary is 0, the default: there are none. Set canary = 1 or more, or remove auto_promote.`}},
		{"canary       = 0\n    auto_promote = true", []string{`and canary = 0: there are none.`}},
	} {
		_, diags := loadSrc(t, t.TempDir(), updateSrc(tt.body), LoadOptions{Environ: []string{}})
		if !diags.HasErrors() {
			t.Errorf("%q: no error", tt.body)
			continue
		}
		if diags.ErrorCount() != 1 {
			t.Errorf("%q: %d errors, want 1:\n%s", tt.body, diags.ErrorCount(), diags.Error())
		}
		for _, w := range tt.want {
			if !strings.Contains(diags.Error(), w) {
				t.Errorf("%q: diagnostics lack %q:\n%s", tt.body, w, diags.Error())
			}
		}
	}

	// Every error at once, each with its position.
	_, diags := loadSrc(t, t.TempDir(), updateSrc(`max_parallel      = -1
    health_check      = "none"
    healthy_deadline  = "0s"
    progress_deadline = "1x"
    auto_promote      = true`), LoadOptions{Environ: []string{}})
	want := []string{"Invalid max_parallel", "Invalid health_check", "Invalid healthy_deadline", "Invalid duration", "auto_promote without canary"}
	if got := summaries(diags); !reflect.DeepEqual(got, want) {
		t.Errorf("summaries %q, want %q", got, want)
	}
	for i, d := range diags.All() {
		if d.Range == nil || d.Range.Start.Line != 5+i || !strings.HasSuffix(d.Range.Filename, "main.hcl") {
			t.Errorf("%s at %+v, want line %d", d.Summary, d.Range, 5+i)
		}
	}
}

// TestUpdateWarnings: what the count makes of the numbers, and settings
// max_parallel = 0 leaves unused.
func TestUpdateWarnings(t *testing.T) {
	for _, tt := range []struct {
		count, body string
		want        []string // summaries
		detail      string
	}{
		{"3", `canary = 3`, nil, ""},
		{"3", `canary = 4`, []string{"More canaries than instances"},
			`canary = 4, but service "s" has count = 3: a canary updates in place, in its own slot, so only 3 instances can be canaries`},
		{"0", `canary = 4`, []string{"No instance will run"}, ""},
		{"3", `max_parallel = 3`, nil, ""},
		{"3", `max_parallel = 5`, []string{"max_parallel above count"},
			`max_parallel = 5, but service "s" has count = 3: an update replaces all 3 instances at once`},
		{"1", `max_parallel = 5`, nil, ""}, // one instance is always replaced at once
		{"3", `max_parallel = 0`, nil, ""},
		{"3", "max_parallel = 0\n    canary       = 4\n    auto_revert  = true",
			[]string{"Not used with max_parallel = 0", "Not used with max_parallel = 0"},
			`max_parallel = 0 replaces every instance of service "s" at once, without a rolling update, so canary is not used.`},
	} {
		src := "service \"s\" {\n  command = [\"s\"]\n  count   = " + tt.count + "\n  update {\n    " + tt.body + "\n  }\n}\n"
		cfg, diags := loadSrc(t, t.TempDir(), src, LoadOptions{Environ: []string{}})
		if cfg == nil {
			t.Errorf("%s: %s", tt.body, diags.Error())
			continue
		}
		var got []string
		for _, d := range diags.All() {
			if d.Range == nil {
				t.Errorf("%s: %s has no position", tt.body, d.Summary)
			}
			got = append(got, d.Summary)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("count %s, %q: warnings %q, want %q", tt.count, tt.body, got, tt.want)
		}
		if tt.detail != "" && !strings.Contains(diags.Error(), tt.detail) {
			t.Errorf("%q: diagnostics lack %q:\n%s", tt.body, tt.detail, diags.Error())
		}
	}
}
