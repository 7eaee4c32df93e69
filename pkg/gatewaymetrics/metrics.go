// Package gatewaymetrics is what an effectfence gateway tells Prometheus: how each tools/call
// ended (wrap.CallEvent), how long it took, the HTTP sessions open, the HTTP requests served,
// and the fence engine's own counters, on a registry of its own, served in the Prometheus text
// format by Handler.
//
// Every label value comes from a fixed set, so nothing an agent or an MCP server sends can add
// a series: an outcome or a code outside the known ones is counted as "other", a method
// outside the usual HTTP ones as "other", a status outside 100-599 as class "other". Calls are
// not labelled by tool, since tool names come from the server and the agent; an operator who
// wants a per-tool split names the tools (New("charge", "refund")), and only those get a
// series of their own in effectfence_tool_calls_by_tool_total, every other tool counting as
// "other". The number of series is therefore bounded by the configuration, whatever the
// traffic.
//
// The package is named for what it measures rather than after its dependency, as the store
// packages are, since a package named prometheus would shadow client_golang's in every file
// that uses both.
package gatewaymetrics

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Namespace prefixes every metric name of this package.
const Namespace = "effectfence"

// Other is the label value of anything outside a label's known set.
const Other = "other"

// NoCode is the code label of an event without a code (a success, a replay).
const NoCode = "none"

// Outcomes are the values of wrap.CallEvent.Outcome (see its doc comment).
var Outcomes = []string{"passed", "executed", "replayed", "coalesced", "refused", "unknown", "invalid"}

// Codes are the codes a wrap.CallEvent carries: how an executed call ended (is_error,
// rpc_error, task), why a call was refused (the fence's stable codes, tools_unknown,
// not_sent), and the code of the failure a coalesced call shared.
var Codes = []string{
	"is_error", "rpc_error", "task", "not_sent", wrap.CodeToolsUnknown,
	fence.CodeInFlight, fence.CodePriorFailure, fence.CodeConflict, fence.CodeStale,
	fence.CodeDomainRace, fence.CodeLeaseLost, fence.CodeInvalid, fence.CodeStore,
	fence.CodeFailedWait,
}

// methods are the HTTP methods counted by name.
var methods = []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodPatch}

// LatencyBuckets are the upper bounds, in seconds, of the tools/call latency histograms: from
// 100 µs (a replay served from a local ledger) to 60 s (a slow tool; the default wait of a
// duplicate is 30 s).
var LatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// statsTimeout bounds the ledger query a scrape makes for the engine's counters.
const statsTimeout = 2 * time.Second

// Metrics holds the gateway's metrics. Its methods are safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	byTool   *prometheus.CounterVec // nil unless tools were named
	tools    map[string]string      // tool name -> its label value
	sessions prometheus.Gauge
	opened   prometheus.Counter
	requests *prometheus.CounterVec
	engine   *engineCollector
	outcome  map[string]bool
	code     map[string]bool
	method   map[string]bool
}

// New returns metrics on a registry of their own (the process's default registry is left
// alone), with the Go runtime and process collectors. tools names the tools whose calls are
// also counted per tool; a name that is not valid UTF-8 is skipped, since Prometheus cannot
// carry it.
func New(tools ...string) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		outcome: setOf(Outcomes),
		code:    setOf(Codes),
		method:  setOf(methods),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "tool_calls_total",
			Help: "tools/call requests answered, by outcome (passed, executed, replayed, coalesced, refused, unknown, invalid) and code (none, a known code, or other).",
		}, []string{"outcome", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "tool_call_duration_seconds",
			Help:    "Time from a tools/call request to its answer, by outcome.",
			Buckets: LatencyBuckets,
		}, []string{"outcome"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sessions_open",
			Help: "MCP sessions open on the HTTP front.",
		}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "sessions_opened_total",
			Help: "MCP sessions opened on the HTTP front.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "http_requests_total",
			Help: "HTTP requests answered, by method (GET, POST, DELETE, HEAD, OPTIONS, PUT, PATCH or other) and status class (1xx to 5xx, or other).",
		}, []string{"method", "class"}),
		engine: &engineCollector{},
	}
	m.reg.MustRegister(m.calls, m.latency, m.sessions, m.opened, m.requests, m.engine,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every outcome has its series from the start, at zero, so that an alert on the first
	// unknown outcome sees an increase (a series born at 1 shows none).
	for _, o := range Outcomes {
		m.calls.WithLabelValues(o, NoCode)
		m.latency.WithLabelValues(o)
	}
	if len(tools) > 0 {
		m.tools = map[string]string{}
		for _, t := range tools {
			if utf8.ValidString(t) {
				m.tools[t] = t
			}
		}
		m.byTool = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "tool_calls_by_tool_total",
			Help: "tools/call requests answered, by tool (the tools the operator named, or other) and outcome.",
		}, []string{"tool", "outcome"})
		m.reg.MustRegister(m.byTool)
	}
	return m
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Observe counts one answered tools/call; it is meant for wrap.Options.Observe.
func (m *Metrics) Observe(ev wrap.CallEvent) {
	outcome := ev.Outcome
	if !m.outcome[outcome] {
		outcome = Other
	}
	code := ev.Code
	switch {
	case code == "":
		code = NoCode
	case !m.code[code]:
		code = Other
	}
	m.calls.WithLabelValues(outcome, code).Inc()
	m.latency.WithLabelValues(outcome).Observe(ev.Elapsed.Seconds())
	if m.byTool != nil {
		tool, ok := m.tools[ev.Tool]
		if !ok {
			tool = Other
		}
		m.byTool.WithLabelValues(tool, outcome).Inc()
	}
}

// SessionOpened counts an MCP session opened on the HTTP front; SessionClosed, one closed.
// Each session must be closed exactly once.
func (m *Metrics) SessionOpened() {
	m.sessions.Inc()
	m.opened.Inc()
}

// SessionClosed counts an MCP session closed (ended by the client, expired or shut down).
func (m *Metrics) SessionClosed() { m.sessions.Dec() }

// HTTP counts one answered HTTP request.
func (m *Metrics) HTTP(method string, status int) {
	method = strings.ToUpper(method)
	if !m.method[method] {
		method = Other
	}
	class := Other
	if status >= 100 && status <= 599 {
		class = strconv.Itoa(status/100) + "xx"
	}
	m.requests.WithLabelValues(method, class).Inc()
}

// Handler serves the metrics in the Prometheus text format (or OpenMetrics when the scraper
// asks for it).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// WatchEngine exports e's counters (fence.Engine.Stats) at each scrape: this process's since
// it started, and the ledger's totals over every process that shares it. A later call
// replaces the engine watched; nil stops watching.
func (m *Metrics) WatchEngine(e *fence.Engine) { m.engine.set(e) }

// Registry is the registry the metrics are on, for a caller that adds its own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// engineCollector reads fence.Engine.Stats at scrape time, so the engine keeps no second set
// of counters and a scrape sees the ledger's totals as they are.
type engineCollector struct {
	mu sync.Mutex
	e  *fence.Engine
}

func (c *engineCollector) set(e *fence.Engine) {
	c.mu.Lock()
	c.e = e
	c.mu.Unlock()
}

func (c *engineCollector) get() *fence.Engine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.e
}

var (
	descAttempts = prometheus.NewDesc(Namespace+"_fence_attempts_total",
		"Attempts the fence engine of this process decided since it started, by result (admitted, reclaimed, replayed, coalesced, refused_*), and lease_lost for refused commits, aborts, releases and heartbeats.",
		[]string{"result"}, nil)
	descLedger = prometheus.NewDesc(Namespace+"_ledger_attempts_total",
		"Attempts recorded in the ledger by every process that shares it (this one's not yet flushed included), by result.",
		[]string{"result"}, nil)
	descLedgerUp = prometheus.NewDesc(Namespace+"_ledger_up",
		"1 if the ledger answered the last scrape's query for its counters, else 0.",
		nil, nil)
)

// results pairs each fence.Counters field with its result label (the field's JSON name).
func results(c fence.Counters) []struct {
	name string
	n    uint64
} {
	return []struct {
		name string
		n    uint64
	}{
		{"admitted", c.Admitted}, {"reclaimed", c.Reclaimed}, {"replayed", c.Replayed},
		{"coalesced", c.Coalesced}, {"refused_stale_read_set", c.Stale}, {"refused_domain_race", c.Race},
		{"refused_in_flight", c.InFlight}, {"refused_prior_failure", c.PriorFailure},
		{"refused_conflict", c.Conflict}, {"lease_lost", c.LeaseLost},
	}
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAttempts
	ch <- descLedger
	ch <- descLedgerUp
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.get()
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	s, err := e.Stats(ctx)
	for _, r := range results(s.SinceBoot) {
		ch <- prometheus.MustNewConstMetric(descAttempts, prometheus.CounterValue, float64(r.n), r.name)
	}
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descLedgerUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descLedgerUp, prometheus.GaugeValue, 1)
	for _, r := range results(s.Ledger) {
		ch <- prometheus.MustNewConstMetric(descLedger, prometheus.CounterValue, float64(r.n), r.name)
	}
}
