package render

import (
	"testing"

	dep "github.com/hashicorp/consul-template/dependency"
	ctemplate "github.com/hashicorp/consul-template/template"

	"github.com/mariposa-sh/mariposa/schema"
)

// BenchmarkTemplateExecute: the CPU of one execution of a one-key template
// (the render benchmarks' `value={{ key "k" }}`) with its data at hand, no
// Consul and no file: what each render of a changed template costs before
// its write. consul-template builds its function map and parses the text on
// every execution; this is the figure the render benchmarks' 100 templates
// pay 100 times.
func BenchmarkTemplateExecute(b *testing.B) {
	brain := ctemplate.NewBrain()
	d, err := dep.NewKVGetQuery("bench/k")
	if err != nil {
		b.Fatal(err)
	}
	d.EnableBlocking()
	brain.Remember(d, "v")
	sb := &sandbox{root: b.TempDir(), maxFile: 1 << 20}
	r := newTemplateRunner(&ServiceData{svc: &schema.Service{Name: "bench"}}, &schema.Template{Contents: `value={{ key "bench/k" }}`}, sb)
	if r.ct == nil {
		b.Fatal(r.err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := r.ct.Execute(&ctemplate.ExecuteInput{Brain: brain})
		if err != nil || string(res.Output) != "value=v" {
			b.Fatalf("%q, %v", res.Output, err)
		}
	}
}
