package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mitchellh/cli"

	"github.com/mariposa-sh/mariposa/cluster"
	"github.com/mariposa-sh/mariposa/internal/control"
	"github.com/mariposa-sh/mariposa/supervisor"
)

// EventsCommand prints the fleet's audit records and follows them.
type EventsCommand struct {
	UI cli.Ui
	// Context, when set, ends -follow instead of SIGINT/SIGTERM (tests).
	Context context.Context
	// now replaces time.Now (tests: the switch to the next day).
	now func() time.Time
}

func (c *EventsCommand) Synopsis() string { return "Prints and follows the fleet's audit events" }

func (c *EventsCommand) Help() string {
	return strings.TrimSpace(`
Usage: mariposa events [options]

  Prints the fleet's decisions, as recorded in Consul with each one: claims,
  releases, reschedules, failed slots, resets, deploys and their
  transitions, reverts, promotions, rollouts, the storm brake, pauses,
  resumes and dropped restarts.
  Every node writes the records of its own decisions in the transaction
  that makes them, under mariposa/audit/<yyyy-mm-dd>/; this reads them from
  any agent, oldest first: no log shipping. A record that does not parse is
  reported on standard error and skipped.

  With -follow, keeps printing new records as they are written, anywhere in
  the fleet, with one blocking query on the current day's records, until
  interrupted.

Options:

  -since=1h               Print the records of this long ago up to now
                          (a Go duration: 90s, 30m, 48h).
  -follow                 Then follow: print each new record as it comes.
  -service=NAME           Only records about NAME: a unit (a service or a
                          group with a count) or a slot (web/2).
  -node=NODE              Only records that NODE wrote, or that move a slot
                          from or to NODE.
  -json                   Print each record as one line of JSON, as stored.
  -local                  Also print the events of this machine's mariposa
                          (restarts, exits, health changes...: every
                          instance event, from its audit file), merged in
                          time order; a mariposa run without -cluster
                          writes no fleet records, only these. Not with
                          -follow (follow the node's /v1/events instead).
  -control-socket=PATH    With -local: the mariposa whose audit file is
                          read (audit.jsonl beside its control socket;
                          default as for mariposa restart).
  -audit-file=PATH        With -local: read this audit file instead.

` + consulFlagsHelp + `
`)
}

// followWait bounds each blocking query of -follow; dayGrace is how long
// after midnight UTC -follow still reads the day that ended (records of
// writers whose clocks are a little behind) before it moves on to the new
// day's prefix.
var (
	followWait = 5 * time.Minute
	dayGrace   = 2 * time.Second
)

func (c *EventsCommand) Run(args []string) int {
	var (
		cf             consulFlags
		since          time.Duration
		follow, asJSON bool
		service, node  string
		local          bool
		sock, file     string
	)
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	fs.DurationVar(&since, "since", time.Hour, "")
	fs.BoolVar(&follow, "follow", false, "")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.StringVar(&service, "service", "", "")
	fs.StringVar(&node, "node", "", "")
	fs.BoolVar(&local, "local", false, "")
	fs.StringVar(&sock, "control-socket", "", "")
	fs.StringVar(&file, "audit-file", "", "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		msg := "mariposa events: takes no arguments"
		if err != nil {
			msg = "mariposa events: " + err.Error()
		}
		c.UI.Error(msg + "\n\n" + c.Help())
		return 1
	}
	if since <= 0 {
		c.UI.Error(fmt.Sprintf("mariposa events: -since must be more than 0, got %s", since))
		return 1
	}
	if local && follow {
		c.UI.Error("mariposa events: -local cannot be followed: follow this node's events with curl its /v1/events?follow=1, or tail its audit file")
		return 1
	}
	if file == "" {
		file = filepath.Join(filepath.Dir(control.ResolvePath(sock)), "audit.jsonl")
	}
	client, err := cf.client()
	if err != nil {
		c.UI.Error("mariposa events: " + consulErrText(err))
		return 1
	}
	ctx := c.Context
	if ctx == nil {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	now := c.now
	if now == nil {
		now = time.Now
	}
	p := &eventPrinter{ui: c.UI, json: asJSON, service: service, node: node}

	// The days from -since to today that hold records, each read in full
	// (consistent), then the records of the window in time order.
	start := now()
	from := start.Add(-since)
	days, err := cluster.AuditDays(ctx, client)
	if err != nil {
		c.UI.Error("mariposa events: reading " + cluster.AuditPrefix + ": " + consulErrText(err))
		return 1
	}
	today := cluster.AuditDay(start)
	seen := map[string]bool{} // today's keys, read already: -follow prints only others
	var recs []auditRecord
	for _, day := range days {
		if day < cluster.AuditDay(from) {
			continue
		}
		pairs, _, err := client.KV().List(day, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
		if err != nil {
			c.UI.Error("mariposa events: reading " + day + ": " + consulErrText(err))
			return 1
		}
		for _, r := range p.decode(pairs, nil) {
			if !r.ev.At.Before(from) {
				recs = append(recs, r)
			}
		}
		if day == today {
			for _, kv := range pairs {
				seen[kv.Key] = true
			}
		}
	}
	var nodeRecs []auditRecord
	if !follow {
		nodeRecs, err = p.localEvents(file, from)
		if err != nil && local {
			c.UI.Error("mariposa events: -local: " + consulErrText(err))
			return 1
		}
	}
	if local {
		recs = append(recs, nodeRecs...)
	}
	p.print(recs)
	if !follow {
		if len(recs) == 0 && !asJSON {
			c.UI.Output(fmt.Sprintf("No events in the last %s%s.", since, p.filterText()))
		}
		if !local && len(nodeRecs) > 0 && !asJSON {
			c.UI.Output(fmt.Sprintf("This machine's mariposa recorded %s of its own%s in that time (restarts, exits, health): mariposa events -local shows them.",
				plural(len(nodeRecs), "event"), p.filterText()))
		}
		return 0
	}
	p.header()
	c.follow(ctx, client, p, today, seen, now)
	return 0
}

// follow prints the new records of the current day's prefix with one
// blocking query, moving on to the next day's prefix dayGrace after
// midnight UTC (after a last read of the day that ended).
func (c *EventsCommand) follow(ctx context.Context, client *api.Client, p *eventPrinter, day string, seen map[string]bool, now func() time.Time) {
	var idx uint64
	failing := false
	backoff := time.Second
	for ctx.Err() == nil {
		d, _ := time.Parse(time.DateOnly, strings.TrimSuffix(strings.TrimPrefix(day, cluster.AuditPrefix), "/"))
		switchAt := d.Add(24*time.Hour + dayGrace)
		wait := min(followWait, switchAt.Sub(now()))
		last := wait <= 0 // the day is over: one last read, then the next day
		q := &api.QueryOptions{WaitIndex: idx, WaitTime: max(wait, 0)}
		if last {
			q.WaitIndex = 0
		}
		pairs, meta, err := client.KV().List(day, q.WithContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				c.UI.Error("mariposa events: " + consulErrText(err) + "; retrying")
				failing = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		if failing {
			c.UI.Error("mariposa events: following again")
			failing, backoff = false, time.Second
		}
		// An index that went backwards (Consul's state was restored) is
		// reset, as Consul asks; seen keeps the records from printing twice.
		if meta.LastIndex < idx {
			idx = 0
		} else {
			idx = meta.LastIndex
		}
		p.print(p.decode(pairs, seen))
		if last {
			day = cluster.AuditDay(d.Add(24 * time.Hour))
			idx = 0
			clear(seen)
		}
	}
}

// auditRecord is one decoded record and its key.
type auditRecord struct {
	key string
	raw []byte
	ev  cluster.AuditEvent
}

// eventPrinter filters and prints records: a table whose column widths
// are set by the first records printed (later ones, followed, keep them),
// or JSON lines.
type eventPrinter struct {
	ui            cli.Ui
	json          bool
	service, node string
	widths        []int
	headed        bool
}

// decode parses pairs not in seen (nil: every pair), marks them seen,
// reports the corrupt ones and returns those that pass the filters.
func (p *eventPrinter) decode(pairs api.KVPairs, seen map[string]bool) []auditRecord {
	var out []auditRecord
	for _, kv := range pairs {
		if seen != nil {
			if seen[kv.Key] {
				continue
			}
			seen[kv.Key] = true
		}
		var ev cluster.AuditEvent
		err := json.Unmarshal(kv.Value, &ev)
		if err == nil && (ev.At.IsZero() || ev.Action == "") {
			err = errors.New(`not an audit record: no "at" or no "action"`)
		}
		if err != nil {
			p.ui.Error(fmt.Sprintf("mariposa events: skipping the corrupt record %s: %v", kv.Key, err))
			continue
		}
		if p.match(ev) {
			out = append(out, auditRecord{key: kv.Key, raw: kv.Value, ev: ev})
		}
	}
	return out
}

func (p *eventPrinter) match(ev cluster.AuditEvent) bool {
	if p.service != "" && ev.Service != p.service && ev.Slot != p.service && auditUnit(ev.Slot) != p.service {
		return false
	}
	if p.node != "" && ev.Node != p.node && ev.From != p.node && ev.To != p.node {
		return false
	}
	return true
}

// auditUnit is the unit of "<unit>/<k>" (a record about a whole unit names
// the unit alone).
func auditUnit(slot string) string {
	i := strings.LastIndexByte(slot, '/')
	if i <= 0 {
		return slot
	}
	if _, err := strconv.Atoi(slot[i+1:]); err != nil {
		return slot
	}
	return slot[:i]
}

func (p *eventPrinter) filterText() string {
	var f []string
	if p.service != "" {
		f = append(f, "about "+p.service)
	}
	if p.node != "" {
		f = append(f, "involving node "+p.node)
	}
	if len(f) == 0 {
		return ""
	}
	return " " + strings.Join(f, " ")
}

var eventColumns = []string{"TIME", "NODE", "SERVICE", "ACTION", "FROM -> TO", "ACTOR", "REASON"}

func eventRow(ev cluster.AuditEvent) []string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	// The slot says the unit too; a record naming another service as
	// well (a deployment named apart from its unit) shows both.
	what := ev.Slot
	switch {
	case what == "":
		what = ev.Service
	case ev.Service != "" && ev.Service != auditUnit(what):
		what = ev.Service + " (" + what + ")"
	}
	move := "-"
	switch {
	case ev.From != "" && ev.To != "":
		move = ev.From + " -> " + ev.To
	case ev.To != "":
		move = "-> " + ev.To
	case ev.From != "":
		move = ev.From + " ->"
	}
	return []string{ev.At.UTC().Format(time.RFC3339), dash(ev.Node), dash(what), ev.Action, move, dash(ev.Actor), dash(ev.Reason)}
}

// print prints records in time order (by key for the same time).
func (p *eventPrinter) print(recs []auditRecord) {
	slices.SortStableFunc(recs, func(a, b auditRecord) int {
		if c := a.ev.At.Compare(b.ev.At); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	if p.json {
		for _, r := range recs {
			var b bytes.Buffer
			if err := json.Compact(&b, r.raw); err != nil {
				continue // decoded above: cannot happen
			}
			p.ui.Output(b.String())
		}
		return
	}
	rows := make([][]string, len(recs))
	for i, r := range recs {
		rows[i] = eventRow(r.ev)
	}
	if p.widths == nil && len(rows) > 0 {
		p.setWidths(rows)
	}
	if len(rows) > 0 {
		p.header()
	}
	for _, row := range rows {
		p.ui.Output(p.line(row))
	}
}

// setWidths sizes the columns for rows (and the header), at least as
// wide as a typical record, so followed records mostly line up.
func (p *eventPrinter) setWidths(rows [][]string) {
	p.widths = []int{20, 6, 8, 7, 10, 5, 0}
	for _, row := range append(rows, eventColumns) {
		for i, cell := range row[:len(row)-1] {
			p.widths[i] = max(p.widths[i], len(cell))
		}
	}
}

func (p *eventPrinter) header() {
	if p.json || p.headed {
		return
	}
	if p.widths == nil {
		p.setWidths(nil)
	}
	p.headed = true
	p.ui.Output(p.line(eventColumns))
}

func (p *eventPrinter) line(row []string) string {
	var b strings.Builder
	for i, cell := range row {
		if i == len(row)-1 {
			b.WriteString(cell)
			break
		}
		b.WriteString(cell)
		b.WriteString(strings.Repeat(" ", max(p.widths[i]-len(cell), 0)+2))
	}
	return b.String()
}

// localEvents reads the instance events of a node's audit file (path, and
// its rotated files path.3 .. path.1, oldest first) from from on, as
// records that pass the filters; none, without an error, when the file
// does not exist.
func (p *eventPrinter) localEvents(path string, from time.Time) ([]auditRecord, error) {
	var out []auditRecord
	files := []string{path + ".3", path + ".2", path + ".1", path}
	found := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found = true
		for i, line := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var e supervisor.Event
			if json.Unmarshal(line, &e) != nil || e.Time.IsZero() || e.Kind == "" || e.Time.Before(from) {
				continue
			}
			ev := cluster.AuditEvent{At: e.Time, Node: e.Node, Actor: e.Actor, Service: e.Service, Slot: e.Slot,
				Action: string(e.Kind), Reason: e.Reason}
			if e.PID != 0 && ev.Reason == "" {
				ev.Reason = fmt.Sprintf("pid %d", e.PID)
			}
			if !p.match(ev) {
				continue
			}
			raw, _ := json.Marshal(ev)
			out = append(out, auditRecord{key: fmt.Sprintf("~local/%s/%09d", filepath.Base(f), i), raw: raw, ev: ev})
		}
	}
	if !found {
		return nil, fmt.Errorf("no audit file at %s: is mariposa running on this machine (-control-socket, -audit-file)?", path)
	}
	return out, nil
}
