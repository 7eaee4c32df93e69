package scan

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"

	"github.com/effectfence/effectfence/internal/safetext"
)

// listLimit caps how many sites of one kind the human report prints; --json has them all.
const listLimit = 15

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// place is where a tool is declared, file:line, or "not in the code" for a tool only the
// running server published (it has no file to point at).
func place(t Tool) string {
	if t.File == "" {
		return "not in the code"
	}
	return fmt.Sprintf("%s:%d", safetext.Escape(t.File), t.Line)
}

// WriteText writes the human report: a table of candidates, their evidence, the guards,
// retries and writes found in the repository, what was skipped, and what a source scan
// cannot see. Colour is used only when useColor is set (the caller decides it from the
// stream and NO_COLOR).
func WriteText(w io.Writer, rep *Report, useColor bool) error {
	title := color.New(color.Bold)
	money := color.New(color.FgYellow, color.Bold)
	dim := color.New(color.Faint)
	for _, c := range []*color.Color{title, money, dim} {
		if useColor {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	p := &printer{w: w}

	// Everything below that came from the scanned tree (paths, names, source lines) is
	// escaped: a repository under review must not drive the reviewer's terminal.
	e := safetext.Escape
	p.f("%s %s\n", title.Sprint("effectfence scan"), e(rep.Root))
	p.f("%d source files read (%s); %d left out by rule (vendored, generated, build output, tests, fixtures, hidden, reached twice through a symlink); %d other files ignored\n",
		rep.Files.Scanned, langCounts(rep.Files.ByLanguage), rep.Files.SkippedByRule, rep.Files.Ignored)
	if len(rep.Skipped) > 0 {
		p.f("%d skipped as bad input: %s\n", len(rep.Skipped), reasonCounts(rep.Files.SkippedBad))
	}
	for _, n := range rep.Notes {
		p.f("\n%s %s\n", money.Sprint("Note:"), e(n.Text))
		for i, f := range n.Files {
			if i == listLimit {
				p.f("  ... %d more (--json lists all)\n", len(n.Files)-listLimit)
				break
			}
			p.f("  %s\n", e(f))
		}
	}
	p.f("\n%s\n", title.Sprintf("Candidates: %d of %d tools found could repeat an effect if called twice", len(rep.Candidates), len(rep.Candidates)+len(rep.Others)))
	p.f("%s\n", dim.Sprint("Evidence for a reviewer, not a verdict. The guard may live in a service this code calls."))
	if len(rep.Candidates) > 0 {
		tbl := tablewriter.NewTable(w)
		tbl.Header("Tool", "Where", "Money", "Why")
		for _, t := range rep.Candidates {
			m := ""
			if t.Money {
				m = "money"
			}
			if err := tbl.Append(shownName(t.Name), place(t), m, e(t.Reason)); err != nil {
				return err
			}
		}
		if p.err == nil {
			p.err = tbl.Render()
		}
		p.f("\n%s\n", title.Sprint("Evidence per candidate"))
		for _, t := range rep.Candidates {
			name := shownName(t.Name)
			if t.Money {
				name += " " + money.Sprint("[money]")
			}
			p.f("  %s  %s  (%s)\n", name, place(t), e(t.Style))
			if t.NameFrom != "" {
				p.f("    name from %s\n", e(t.NameFrom))
			}
			if len(t.Via) > 0 {
				p.f("    followed into %s (used by this tool only)\n", e(strings.Join(t.Via, ", ")))
			}
			for _, w := range t.Evidence {
				p.f("    write  %s:%d  %-7s %s\n", e(w.File), w.Line, e(w.Kind), e(w.Text))
			}
			for _, g := range t.Guards {
				p.f("    guard  %s:%d  %s: %s\n", e(g.File), g.Line, e(g.Kind), e(g.Text))
			}
			if len(t.Evidence) == 0 {
				p.f("    %s\n", dim.Sprint("no write site in its own code; the name is the evidence"))
			}
		}
	}
	if len(rep.Others) > 0 {
		p.f("\n%s\n", title.Sprintf("Not candidates (%d)", len(rep.Others)))
		for _, t := range rep.Others {
			p.f("  %s  %s  %s\n", shownName(t.Name), place(t), dim.Sprint(e(t.Reason)))
		}
	}
	if rep.Run != nil {
		if err := p.run(w, title, dim, rep); err != nil {
			return err
		}
	}
	p.sites(title, "Guards found in the repository", rep.Guards)
	p.sites(title, "Retry sites in the repository", rep.Retries)
	p.sites(title, "Write sites in the repository (corroboration, not attributed to any tool unless listed above)", rep.Writes)
	if len(rep.Unresolved) > 0 {
		p.sites(title, "Tool declarations whose name is computed at run time (not classified)", rep.Unresolved)
	}
	if len(rep.Skipped) > 0 {
		p.f("\n%s\n", title.Sprintf("Skipped (%d)", len(rep.Skipped)))
		for i, s := range rep.Skipped {
			if i == listLimit {
				p.f("  ... %d more (--json lists all)\n", len(rep.Skipped)-listLimit)
				break
			}
			detail := ""
			if s.Detail != "" {
				detail = " (" + e(s.Detail) + ")"
			}
			p.f("  %s  %s%s\n", e(s.Path), e(s.Reason), detail)
		}
	}
	p.f("\n%s\n", title.Sprint("What a source scan cannot see"))
	for _, c := range rep.CannotSee {
		p.f("  - %s\n", c)
	}
	return p.err
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func (p *printer) sites(title *color.Color, heading string, ss []Site) {
	p.f("\n%s\n", title.Sprintf("%s: %d", heading, len(ss)))
	for i, s := range ss {
		if i == listLimit {
			p.f("  ... %d more (--json lists all)\n", len(ss)-listLimit)
			return
		}
		p.f("  %s:%d  %-12s %s\n", safetext.Escape(s.File), s.Line, safetext.Escape(s.Kind), safetext.Escape(s.Text))
	}
}

func langCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func reasonCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// SARIF 2.1.0, the subset code-scanning UIs read.

// SARIF rule ids, stable.
const (
	RuleCandidate      = "EF1001"
	RuleMoneyCandidate = "EF1002"
	RuleDisagreement   = "EF1003"
)

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool               sarifTool                   `json:"tool"`
	OriginalURIBaseIDs map[string]sarifArtifactLoc `json:"originalUriBaseIds,omitempty"`
	Results            []sarifResult               `json:"results"`
	Properties         map[string]any              `json:"properties,omitempty"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri,omitempty"`
	Version        string      `json:"version,omitempty"`
	Rules          []sarifRule `json:"rules"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifRule struct {
	ID                   string            `json:"id"`
	Name                 string            `json:"name"`
	ShortDescription     sarifText         `json:"shortDescription"`
	FullDescription      sarifText         `json:"fullDescription"`
	Help                 sarifText         `json:"help"`
	DefaultConfiguration map[string]string `json:"defaultConfiguration"`
}

type sarifResult struct {
	RuleID           string          `json:"ruleId"`
	RuleIndex        int             `json:"ruleIndex"`
	Level            string          `json:"level"`
	Message          sarifText       `json:"message"`
	Locations        []sarifLocation `json:"locations,omitempty"`
	RelatedLocations []sarifLocation `json:"relatedLocations,omitempty"`
	Properties       map[string]any  `json:"properties,omitempty"`
}

type sarifLocation struct {
	ID               *int          `json:"id,omitempty"`
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
	Message          *sarifText    `json:"message,omitempty"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifactLoc `json:"artifactLocation"`
	Region           *sarifRegion     `json:"region,omitempty"`
}

type sarifArtifactLoc struct {
	URI       string `json:"uri"`
	URIBaseID string `json:"uriBaseId,omitempty"`
}

type sarifRegion struct {
	StartLine int `json:"startLine"`
}

// WriteSARIF writes the candidates as a SARIF 2.1.0 log: one result per candidate tool, at
// its declaration, with its write and guard sites as related locations. version is the
// effectfence version for the driver.
func WriteSARIF(w io.Writer, rep *Report, version string) error {
	rules := []sarifRule{
		{
			ID: RuleCandidate, Name: "EffectCandidate",
			ShortDescription: sarifText{"Tool could repeat a side effect if called twice"},
			FullDescription: sarifText{"The tool's name or its own code suggests a side effect (a write, a send, a state change). " +
				"If an agent retries or two agents call it with the same arguments, the effect may happen twice unless something deduplicates it. " +
				"This is evidence from source text, not a verdict."},
			Help: sarifText{"Check whether the effect is deduplicated (idempotency key, request id, upsert, conditional write) here or in the service it calls; " +
				"`effectfence probe` runs identical concurrent calls to see, and `effectfence wrap` fences them."},
			DefaultConfiguration: map[string]string{"level": "note"},
		},
		{
			ID: RuleMoneyCandidate, Name: "MoneyEffectCandidate",
			ShortDescription: sarifText{"Tool that may move money could repeat its effect if called twice"},
			FullDescription: sarifText{"As EF1001, and money words appear in the tool's name or in the writes of its own code. " +
				"This is evidence from source text, not a verdict."},
			Help:                 sarifText{"As EF1001; a repeated money movement is the costliest kind."},
			DefaultConfiguration: map[string]string{"level": "warning"},
		},
		{
			ID: RuleDisagreement, Name: "AnnotationDisagreesWithCode",
			ShortDescription: sarifText{"Published readOnlyHint/destructiveHint disagree with what the code suggests"},
			FullDescription: sarifText{"With --run: the running server publishes annotations for this tool that say the opposite of what its name and own code suggest. " +
				"Clients and gateways decide retries and confirmations from these hints."},
			Help:                 sarifText{"Check the tool's handler and correct either the annotation or the code."},
			DefaultConfiguration: map[string]string{"level": "note"},
		},
	}
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: "effectfence", InformationURI: "https://github.com/effectfence/effectfence", Version: version, Rules: rules}},
		Results: []sarifResult{},
		Properties: map[string]any{
			"guards": len(rep.Guards), "retries": len(rep.Retries), "writes": len(rep.Writes),
			"filesScanned": rep.Files.Scanned, "skipped": len(rep.Skipped), "cannotSee": rep.CannotSee,
			"notes": rep.Notes,
		},
	}
	if rep.Run != nil {
		run.Properties["run"] = map[string]any{
			"command": rep.Run.Command, "published": len(rep.Run.Published),
			"publishedNotFoundInCode": rep.Run.NotInCode, "declaredNotPublished": rep.Run.NotPublished,
			"disagreements": rep.Run.Disagreements,
		}
	}
	if abs, err := filepath.Abs(rep.Root); err == nil {
		run.OriginalURIBaseIDs = map[string]sarifArtifactLoc{"SRCROOT": {URI: dirURI(filepath.ToSlash(abs))}}
	}
	// GitHub code scanning rejects a whole log in which one result has no location, so a
	// result about a tool found only in the server's list (no file to point at) goes here,
	// beside the results, instead of among them.
	unlocated := []map[string]string{}
	for _, t := range rep.Candidates {
		rule, idx, level := RuleCandidate, 0, "note"
		if t.Money {
			rule, idx, level = RuleMoneyCandidate, 1, "warning"
		}
		msg := fmt.Sprintf("Tool %q could repeat its effect if called twice: %s. %d write site(s) and %d guard site(s) in its own code. "+
			"A source scan cannot see guards in the services it calls.", t.Name, t.Reason, len(t.Evidence), len(t.Guards))
		res := sarifResult{
			RuleID: rule, RuleIndex: idx, Level: level, Message: sarifText{msg},
			Properties: map[string]any{"tool": t.Name, "money": t.Money, "style": t.Style},
		}
		if t.File == "" {
			unlocated = append(unlocated, map[string]string{"ruleId": rule, "tool": t.Name, "message": msg})
			continue
		}
		res.Locations = []sarifLocation{loc(rep, t.File, t.Line, "")}
		if t.Annotations != nil {
			res.Properties["publishedAnnotations"] = t.Annotations
		}
		id := 1
		for _, e := range t.Evidence {
			l := loc(rep, e.File, e.Line, "write ("+e.Kind+"): "+e.Text)
			l.ID = ptr(id)
			id++
			res.RelatedLocations = append(res.RelatedLocations, l)
		}
		for _, g := range t.Guards {
			l := loc(rep, g.File, g.Line, "guard ("+g.Kind+"): "+g.Text)
			l.ID = ptr(id)
			id++
			res.RelatedLocations = append(res.RelatedLocations, l)
		}
		run.Results = append(run.Results, res)
	}
	if rep.Run != nil {
		where := map[string]Tool{}
		for _, ts := range [][]Tool{rep.Candidates, rep.Others} {
			for _, t := range ts {
				where[t.Name] = t
			}
		}
		for _, d := range rep.Run.Disagreements {
			res := sarifResult{RuleID: RuleDisagreement, RuleIndex: 2, Level: "note",
				Message:    sarifText{fmt.Sprintf("Tool %q: the server publishes %s; the code suggests %s.", d.Tool, d.Annotation, d.Code)},
				Properties: map[string]any{"tool": d.Tool}}
			t := where[d.Tool]
			if t.File == "" {
				unlocated = append(unlocated, map[string]string{"ruleId": RuleDisagreement, "tool": d.Tool, "message": res.Message.Text})
				continue
			}
			res.Locations = []sarifLocation{loc(rep, t.File, t.Line, "")}
			run.Results = append(run.Results, res)
		}
	}
	if len(unlocated) > 0 {
		run.Properties["resultsWithoutLocation"] = unlocated
	}
	log := sarifLog{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(log)
}

func ptr(i int) *int { return &i }

// dirURI is the file: URI of a folder given as an absolute path with forward slashes. A
// Windows path (C:/src) needs a slash before the drive, or "C:" reads as the URI's host.
func dirURI(slashPath string) string {
	if !strings.HasPrefix(slashPath, "/") {
		slashPath = "/" + slashPath
	}
	if !strings.HasSuffix(slashPath, "/") {
		slashPath += "/"
	}
	return (&url.URL{Scheme: "file", Path: slashPath}).String()
}

// loc is a SARIF location in file (as the report shows it; rep's raw path for one shown with
// escapes).
func loc(rep *Report, file string, line int, msg string) sarifLocation {
	if raw, ok := rep.rawPaths[file]; ok {
		file = raw
	}
	l := sarifLocation{PhysicalLocation: sarifPhysical{
		ArtifactLocation: sarifArtifactLoc{URI: (&url.URL{Path: file}).String(), URIBaseID: "SRCROOT"},
		Region:           &sarifRegion{StartLine: max(line, 1)},
	}}
	if msg != "" {
		l.Message = &sarifText{msg}
	}
	return l
}

// run prints what --run added: the server's tools with their published hints beside what
// the code suggests, and what the two sides do not share.
func (p *printer) run(w io.Writer, title, dim *color.Color, rep *Report) error {
	// The server chose its tool names and annotations, the tree its file names: escaped. A
	// published name is also cut short (--json has it whole): the server's list has no bound
	// on a name's length, and a name of a megabyte made a table row of a megabyte.
	e := safetext.Escape
	r := rep.Run
	p.f("\n%s\n", title.Sprintf("Published by the running server: %d tool(s) (%s)", len(r.Published), e(strings.Join(r.Command, " "))))
	byName := map[string]Tool{}
	for _, ts := range [][]Tool{rep.Candidates, rep.Others} {
		for _, t := range ts {
			byName[t.Name] = t
		}
	}
	disagree := map[string]bool{}
	for _, d := range r.Disagreements {
		disagree[d.Tool] = true
	}
	if len(r.Published) > 0 {
		tbl := tablewriter.NewTable(w)
		tbl.Header("Tool", "readOnlyHint", "destructiveHint", "Code suggests", "Report")
		for _, pt := range r.Published {
			ro, de := "unset", "unset"
			if pt.Annotations != nil {
				ro, de = boolText(pt.Annotations.ReadOnlyHint), boolText(pt.Annotations.DestructiveHint)
			}
			t, ok := byName[pt.Name]
			code, verdict := "not found in code", ""
			if ok {
				code = e(strings.SplitN(t.CodeSuggests, ":", 2)[0])
				if t.File != "" {
					code += " (" + e(t.File) + ":" + itoa(t.Line) + ")"
				}
				verdict = "not a candidate"
				if t.Candidate {
					verdict = "candidate"
				}
			}
			if disagree[pt.Name] {
				verdict += ", disagrees"
			}
			if err := tbl.Append(shownName(pt.Name), ro, de, code, verdict); err != nil {
				return err
			}
		}
		if p.err == nil {
			p.err = tbl.Render()
		}
	}
	for _, d := range r.Disagreements {
		p.f("  disagreement  %s: published %s; the code suggests %s\n", shownName(d.Tool), e(d.Annotation), e(d.Code))
	}
	if len(r.NotInCode) > 0 {
		p.f("  published but not found in the code: %s\n", e(strings.Join(shortNames(r.NotInCode), ", ")))
	}
	if len(r.NotPublished) > 0 {
		p.f("  declared in the code but not published by this run: %s\n", e(strings.Join(r.NotPublished, ", ")))
		p.f("  %s\n", dim.Sprint("(a feature switch, a client capability or an environment variable may gate them)"))
	}
	return p.err
}

// maxShownName is how much of a published tool name the text report shows: MCP's names are
// at most 128 characters (SEP-986), and the code's are at most 100 (validToolName).
const maxShownName = 128

// shownName is a tool name as the text report shows it: cut short (shortName) and escaped.
func shownName(name string) string { return safetext.Escape(shortName(name)) }

// shortName returns name, or its first maxShownName bytes (cut at a character's start) and
// how many bytes more it has.
func shortName(name string) string {
	if len(name) <= maxShownName {
		return name
	}
	cut := maxShownName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "… (" + itoa(len(name)-cut) + " bytes more; --json has it whole)"
}
