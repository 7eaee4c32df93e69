package probe

import (
	"fmt"
	"io"
	"strings"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"

	"github.com/effectfence/effectfence/internal/safetext"
)

// maxAnswerRows bounds the answers table; the rest are summarised in one line.
const maxAnswerRows = 15

// WriteText writes the human report: what was sent, a table of counts, a table of the distinct
// answers, and the verdict with what it does and does not prove. colour should be true only
// when w is a terminal and NO_COLOR is unset; the caller decides.
func (r *Report) WriteText(w io.Writer, colour bool) error {
	p := &printer{w: w}
	how := "concurrent"
	if r.Pattern == Retry {
		how = "retried (one after another)"
	}
	p.f("effectfence probe: %d byte-identical %s call(s) to %s %s\n", r.Calls, how, safetext.Escape(r.Tool), safetext.Clip(oneLine(string(r.Args)), 80))
	if r.Witness != nil {
		kind := "reads state: never proves once"
		if r.Witness.Kind == Executions {
			kind = "counts executions"
		}
		p.f("witness: %s (%s)\n", safetext.Clip(oneLine(r.Witness.Command), 100), kind)
	}
	p.f("\n")

	counts := tablewriter.NewTable(w)
	counts.Header("what", "count")
	sent := "sent (identical, at once)"
	if r.Pattern == Retry {
		sent = "sent (identical, one after another)"
	}
	rows := [][]any{
		{sent, r.Calls - r.NotSent},
		{"succeeded", r.Succeeded},
		{"tool errors (isError)", r.ToolErrors},
		{"protocol errors (JSON-RPC)", r.ProtocolErrors},
		{"no answer (transport failure)", r.TransportFailures},
		{"distinct successful answers", r.Distinct},
	}
	if r.NotSent > 0 {
		label := "not sent (--timeout passed first)"
		switch r.notReached {
		case 0:
		case r.NotSent:
			label = "not sent (the server had exited)"
		default:
			label = "not sent (--timeout passed, or server gone)"
		}
		rows = append(rows, []any{label, r.NotSent})
	}
	if r.ResultNotKept > 0 {
		rows = append(rows, []any{"wrap: already run, result not kept", r.ResultNotKept})
	}
	if r.DistinctErrors > 0 {
		rows = append(rows, []any{"distinct tool-error answers", r.DistinctErrors})
	}
	if r.Witness != nil {
		label := "change of the state the witness reads"
		if r.Witness.Kind == Executions {
			label = "executions counted by the witness"
		}
		rows = append(rows,
			[]any{"witness before → after", fmt.Sprintf("%d → %d", r.Witness.Before, r.Witness.After)},
			[]any{label, r.Witness.Effects})
	}
	for _, row := range rows {
		p.err(counts.Append(row...))
	}
	p.err(counts.Render())

	if len(r.Answers) > 0 {
		p.f("\n")
		answers := tablewriter.NewTable(w)
		answers.Header("calls", "kind", "answer", "fingerprint")
		for i, a := range r.Answers {
			if i == maxAnswerRows {
				break
			}
			kind := "ok"
			switch {
			case a.IsError:
				kind = "tool error"
			case a.NotKept:
				kind = "wrap notice"
			}
			// The preview is the server's text, shortened by whole characters: escaping it
			// afterwards cannot cut an escape.
			p.err(answers.Append(a.Calls, kind, safetext.Escape(a.Preview), a.Fingerprint[:12]))
		}
		p.err(answers.Render())
		if extra := len(r.Answers) - maxAnswerRows; extra > 0 {
			p.f("… and %d more distinct answers (all of them are in --json)\n", extra)
		}
	}
	if len(r.Failures) > 0 {
		p.f("\nfailures:\n")
		for _, f := range r.Failures {
			p.f("  %d × %s: %s\n", f.Calls, safetext.Escape(f.Kind), safetext.Clip(oneLine(f.Message), 120))
		}
	}

	head := color.New(color.Bold)
	switch r.Verdict {
	case DoubleFire:
		head.Add(color.FgRed)
	case OnceMeasured, NoRaceSurface:
		head.Add(color.FgGreen)
	default:
		head.Add(color.FgYellow)
	}
	if colour {
		head.EnableColor()
	} else {
		head.DisableColor()
	}
	p.f("\n%s\n", head.Sprint(r.Headline))
	p.f("  proven:     %s\n", r.Proven)
	p.f("  not proven: %s\n", r.NotProven)
	for _, n := range r.Notes {
		p.f("  note:       %s\n", safetext.Escape(n))
	}
	return p.e
}

// printer keeps the first write error so the report code reads straight.
type printer struct {
	w io.Writer
	e error
}

func (p *printer) f(format string, a ...any) {
	if p.e == nil {
		_, p.e = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) err(e error) {
	if p.e == nil && e != nil {
		p.e = e
	}
}

// Summary is the verdict in one line, for logs and the demo.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d calls, %d succeeded, %d distinct", r.Headline, r.Calls, r.Succeeded, r.Distinct)
	if r.Witness != nil && r.Witness.Kind == Executions {
		fmt.Fprintf(&b, ", %d executions counted", r.Witness.Effects)
	} else if r.Witness != nil {
		fmt.Fprintf(&b, ", witness state moved by %d", r.Witness.Effects)
	}
	return b.String()
}
