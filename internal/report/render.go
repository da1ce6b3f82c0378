package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
)

// shown is a copy of r whose free text is safe to show in a terminal or a
// page (see termsafe): a revision or a name read from the cluster must not
// carry terminal control sequences to the reader of the Markdown (printed
// on stdout) or of the HTML file (often looked at with cat or less).
func (r *Report) shown() *Report {
	s := *r
	s.Suite, s.Namespace = termsafe.String(r.Suite), termsafe.String(r.Namespace)
	s.Revision, s.Progress = termsafe.String(r.Revision), termsafe.String(r.Progress)
	s.Cells = make([]Cell, len(r.Cells))
	for i, c := range r.Cells {
		c.Agent, c.Fixture = termsafe.String(c.Agent), termsafe.String(c.Fixture)
		runs := make([]Run, len(c.Runs))
		for j, run := range c.Runs {
			for _, f := range []*string{&run.Name, &run.Agent, &run.Fixture, &run.Phase, &run.Verdict, &run.Class,
				&run.Reason, &run.Node, &run.Digest, &run.EvidenceConfigMap, &run.FixtureHash, &run.FixtureDigest, &run.Reward,
				&run.SignedBy, &run.StoredRef, &run.TrajectoryNote} {
				*f = termsafe.String(*f)
			}
			if run.Usage != nil {
				// The model asked for is the run author's; the models
				// that answered, the provider's.
				u := *run.Usage
				u.ModelRequested = termsafe.String(u.ModelRequested)
				u.Models = make([]string, len(run.Usage.Models))
				for k, m := range run.Usage.Models {
					u.Models[k] = termsafe.String(m)
				}
				run.Usage = &u
			}
			runs[j] = run
		}
		c.Runs = runs
		s.Cells[i] = c
	}
	s.Rounds = make([]harnessv1.RoundSummary, len(r.Rounds))
	for i, round := range r.Rounds {
		round.Revision, round.PassRate = termsafe.String(round.Revision), termsafe.String(round.PassRate)
		s.Rounds[i] = round
	}
	return &s
}

// percent formats a rate as a percentage with one decimal.
func percent(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// Markdown writes the summary for CI logs: the round, its totals, and one
// table row per cell with n, pass rate and its 95% interval.
func (r *Report) Markdown(w io.Writer) error {
	r = r.shown()
	var b strings.Builder
	fmt.Fprintf(&b, "## HarnessSuite %s/%s — round %d", r.Namespace, r.Suite, r.Round)
	if r.Revision != "" {
		fmt.Fprintf(&b, " (revision %s)", mdEscape(r.Revision))
	}
	b.WriteString("\n\n")
	c := r.Counts
	fmt.Fprintf(&b, "Progress **%s**: %d passed, %d failed, %d errored, %d running, %d pending.", r.Progress, c.Passed, c.Failed, c.Errored, c.Running, c.Pending)
	if c.Passed+c.Failed > 0 {
		fmt.Fprintf(&b, " Pass rate **%s** (95%% CI %s–%s, n=%d).", percent(r.Rate), percent(r.Lo), percent(r.Hi), c.Passed+c.Failed)
	}
	b.WriteString("\n\n| Agent | Fixture | n | Passed | Failed | Errored | Unfinished | Pass rate | 95% CI | Reward [95% CI] (n) | Tokens in / out / cache |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, cell := range r.Cells {
		rate, ci := "–", "–"
		if cell.N() > 0 {
			rate, ci = percent(cell.Rate), percent(cell.Lo)+"–"+percent(cell.Hi)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n", mdEscape(cell.Agent), mdEscape(cell.Fixture),
			cell.N(), cell.Passed, cell.Failed, cell.Errored, cell.Unfinished, rate, ci, cell.RewardText(), cell.Tokens())
	}
	// Each run's reward, for the cells that have any (a Harbor-style
	// verifier's): the summary's mean hides a run that scored 0.
	var rewarded []string
	for _, cell := range r.Cells {
		var runs []string
		for _, run := range cell.Runs {
			if run.Reward != "" {
				runs = append(runs, fmt.Sprintf("%s %s", mdEscape(run.Name), mdEscape(run.Reward)))
			}
		}
		if len(runs) > 0 {
			rewarded = append(rewarded, fmt.Sprintf("- %s × %s: %s\n", mdEscape(cell.Agent), mdEscape(cell.Fixture), strings.Join(runs, ", ")))
		}
	}
	if len(rewarded) > 0 {
		b.WriteString("\nRewards per run:\n\n")
		for _, l := range rewarded {
			b.WriteString(l)
		}
	}
	if len(r.Rounds) > 0 {
		b.WriteString("\nEarlier rounds: ")
		for i, s := range r.Rounds {
			if i > 0 {
				b.WriteString(", ")
			}
			rate := s.PassRate
			if rate == "" {
				rate = "–"
			}
			fmt.Fprintf(&b, "round %d (revision %s) %s", s.Round, mdEscape(s.Revision), rate)
		}
		b.WriteString(".\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdEscape keeps a name from breaking a Markdown table.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "`", "'").Replace(s)
}

// chart geometry, in SVG user units.
const (
	chartLabelWidth = 260
	chartBarWidth   = 400
	chartRowHeight  = 22
	chartTop        = 24
)

type chartRow struct {
	Label                 string
	Y, TextY, BarW        float64
	LoX, HiX, MidY, RateX float64
	Rate                  string
	Judged                bool
	Anchor                string
}

type htmlData struct {
	*Report
	GeneratedText string
	Rows          []chartRow
	Width, Height float64
	Ticks         []tick
	AxisY         float64
}

type tick struct {
	X     float64
	Label string
}

// HTML writes the self-contained report page: totals, the bar chart of pass
// rate per cell with its Wilson 95% interval, the table, and every run with
// its evidence digest. Names are escaped by html/template.
func (r *Report) HTML(w io.Writer) error {
	r = r.shown()
	d := htmlData{Report: r, GeneratedText: r.Generated.UTC().Format(time.RFC3339)}
	for i, c := range r.Cells {
		y := float64(chartTop + i*chartRowHeight)
		row := chartRow{Label: c.Agent + " × " + c.Fixture, Y: y + 4, TextY: y + 15, MidY: y + 11, Judged: c.N() > 0, Anchor: cellAnchor(i)}
		if row.Judged {
			row.BarW = c.Rate * chartBarWidth
			row.LoX = chartLabelWidth + c.Lo*chartBarWidth
			row.HiX = chartLabelWidth + c.Hi*chartBarWidth
			row.Rate = fmt.Sprintf("%s (n=%d)", percent(c.Rate), c.N())
		} else {
			row.Rate = "no judged run"
		}
		row.RateX = chartLabelWidth + chartBarWidth + 8
		d.Rows = append(d.Rows, row)
	}
	d.AxisY = float64(chartTop + len(r.Cells)*chartRowHeight + 4)
	d.Height = d.AxisY + 20
	d.Width = chartLabelWidth + chartBarWidth + 140
	for _, p := range []float64{0, 0.25, 0.5, 0.75, 1} {
		d.Ticks = append(d.Ticks, tick{X: chartLabelWidth + p*chartBarWidth, Label: fmt.Sprintf("%.0f%%", 100*p)})
	}
	return page().Execute(w, d)
}

func cellAnchor(i int) string { return fmt.Sprintf("cell-%d", i) }

// page is parsed at its first use, not as the package loads: every
// harnessfacts command links this package, and only `report` needs it.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"percent": percent,
		"anchor":  cellAnchor,
		"short": func(s string) string {
			if len(s) > 23 {
				return s[:23] + "…"
			}
			return s
		},
		"dur": func(d time.Duration) string {
			if d <= 0 {
				return ""
			}
			return d.Round(time.Millisecond).String()
		},
	}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>HarnessSuite {{.Namespace}}/{{.Suite}} — round {{.Round}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#1b1f24}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:2em}
.meta{color:#57606a}
table{border-collapse:collapse;width:100%;margin-top:.5em}
th,td{border-bottom:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.Pass{color:#1a7f37;font-weight:600}.Fail{color:#cf222e;font-weight:600}.Error{color:#9a6700;font-weight:600}
svg text{font:12px system-ui,sans-serif;fill:#1b1f24}
.bar{fill:#54aeff}.ci{stroke:#0a3069;stroke-width:1.5}.axis{stroke:#8c959f}
details.trajectory{margin:.6em 0;border:1px solid #d0d7de;border-radius:6px;padding:.4em .8em}
details.trajectory pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0;font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:4px}
details.trajectory pre.result{background:#eef6ee}details.trajectory pre.reasoning{color:#57606a}
.src{font-weight:600;text-transform:uppercase;font-size:11px}
</style>
</head>
<body>
<h1>HarnessSuite {{.Namespace}}/{{.Suite}}</h1>
<p class="meta">Round {{.Round}}{{if .Revision}} (revision <code>{{.Revision}}</code>){{end}} · progress {{.Progress}} · generated {{.GeneratedText}}</p>
<p>{{.Counts.Passed}} passed, {{.Counts.Failed}} failed, {{.Counts.Errored}} errored, {{.Counts.Running}} running, {{.Counts.Pending}} pending.
{{- if or .Counts.Passed .Counts.Failed}} Pass rate <strong>{{percent .Rate}}</strong> (95% CI {{percent .Lo}}–{{percent .Hi}}).{{end}}
Errored runs (the harness could not judge the agent) are not in the pass rate.
The reward is what a Harbor-style verifier wrote (reward.txt, reward.json): per cell its mean with Student's t 95% interval, per run its value; it does not change the verdict.</p>

<h2>Pass rate per agent × fixture</h2>
<p class="meta">Bars: pass rate; whiskers: Wilson 95% confidence interval.</p>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="pass rate per agent and fixture">
{{- range .Ticks}}
<line class="axis" x1="{{.X}}" y1="16" x2="{{.X}}" y2="{{$.AxisY}}" stroke-dasharray="2,3"/>
<text x="{{.X}}" y="12" text-anchor="middle">{{.Label}}</text>
{{- end}}
{{- range .Rows}}
<a href="#{{.Anchor}}"><text x="252" y="{{.TextY}}" text-anchor="end">{{.Label}}</text></a>
{{- if .Judged}}
<rect class="bar" x="260" y="{{.Y}}" width="{{.BarW}}" height="14"/>
<line class="ci" x1="{{.LoX}}" y1="{{.MidY}}" x2="{{.HiX}}" y2="{{.MidY}}"/>
<line class="ci" x1="{{.LoX}}" y1="{{.Y}}" x2="{{.LoX}}" y2="{{.TextY}}"/>
<line class="ci" x1="{{.HiX}}" y1="{{.Y}}" x2="{{.HiX}}" y2="{{.TextY}}"/>
{{- end}}
<text x="{{.RateX}}" y="{{.TextY}}">{{.Rate}}</text>
{{- end}}
</svg>

<h2>Cells</h2>
<table>
<tr><th>Agent</th><th>Fixture</th><th>n</th><th>Passed</th><th>Failed</th><th>Errored</th><th>Unfinished</th><th>Pass rate</th><th>95% CI</th><th>Reward [95% CI] (n)</th><th>Tokens in / out / cache</th></tr>
{{- range $i, $c := .Cells}}
<tr><td><a href="#{{anchor $i}}">{{$c.Agent}}</a></td><td>{{$c.Fixture}}</td><td class="n">{{$c.N}}</td><td class="n">{{$c.Passed}}</td><td class="n">{{$c.Failed}}</td><td class="n">{{$c.Errored}}</td><td class="n">{{$c.Unfinished}}</td>
{{- if $c.N}}<td class="n">{{percent $c.Rate}}</td><td>{{percent $c.Lo}}–{{percent $c.Hi}}</td>{{else}}<td class="n">–</td><td>–</td>{{end}}<td class="n">{{$c.RewardText}}</td><td class="n">{{$c.Tokens}}</td></tr>
{{- end}}
</table>

<h2>Runs and their evidence</h2>
<p class="meta">Check any run's evidence with <code>harnessfacts evidence verify RUN -n {{.Namespace}} --key NODE.pub</code>, or stored evidence by its reference without the cluster: it recomputes every digest and checks the node's signature (docs/evidence.md).</p>
{{- range $i, $c := .Cells}}
<h3 id="{{anchor $i}}">{{$c.Agent}} × {{$c.Fixture}}</h3>
{{- if $c.Runs}}
<table>
<tr><th>#</th><th>Run</th><th>Phase</th><th>Verdict</th><th>Reward</th><th>Node</th><th>Time</th><th>Model and tokens</th><th>Evidence digest</th><th>Fixture hash (created with)</th></tr>
{{- range $c.Runs}}
<tr id="run-{{.Name}}"><td class="n">{{.Repeat}}</td><td><code>{{.Name}}</code></td><td>{{.Phase}}</td><td class="{{.Verdict}}">{{.Verdict}}{{if .Class}} ({{.Class}}){{end}}</td><td class="n">{{or .Reward "–"}}</td><td>{{.Node}}</td><td>{{dur .Duration}}</td>
<td>{{.UsageLine}}</td>
<td>{{if .Digest}}<code title="evidence ConfigMap {{.EvidenceConfigMap}}">{{.Digest}}</code>{{if .SignedBy}}<br><span class="meta">signed by <code>{{.SignedBy}}</code></span>{{end}}{{if .StoredRef}}<br><span class="meta">stored as <code>{{.StoredRef}}</code></span>{{end}}{{else}}–{{end}}
{{- if .Trajectory}}<br><a href="#trajectory-{{.Name}}">trajectory ({{len .Trajectory.Steps}} steps)</a>{{else if .TrajectoryNote}}<br><span class="meta">{{.TrajectoryNote}}</span>{{end}}</td><td><code title="{{.FixtureHash}}">{{short .FixtureHash}}</code></td></tr>
{{- end}}
</table>
{{- range $c.Runs}}{{if .Trajectory}}
<details class="trajectory" id="trajectory-{{.Name}}"><summary>Trajectory of <code>{{.Name}}</code>: {{len .Trajectory.Steps}} steps ({{.Trajectory.Format}}, from the evidence's trajectory.json)</summary>
{{- if .Trajectory.Note}}<p class="meta">{{.Trajectory.Note}}</p>{{end}}
<ol>
{{- range .Trajectory.Steps}}
<li class="step {{.Source}}"><span class="src">{{.Source}}</span>{{if .Model}} <span class="meta">{{.Model}}</span>{{end}}
{{- if .Reasoning}}<pre class="reasoning">{{.Reasoning}}</pre>{{end}}
{{- if .Message}}<pre>{{.Message}}</pre>{{end}}
{{- range .Calls}}<div class="call">→ <code>{{.Name}}</code> <code>{{.Arguments}}</code>{{range .Results}}<pre class="result">{{.}}</pre>{{end}}</div>{{end}}
{{- range .Results}}<pre class="result">{{.}}</pre>{{end}}</li>
{{- end}}
</ol>
</details>
{{- end}}{{end}}
{{- else}}
<p class="meta">No run yet.</p>
{{- end}}
{{- end}}
{{- if .Rounds}}

<h2>Earlier rounds</h2>
<table>
<tr><th>Round</th><th>Revision</th><th>Runs</th><th>Passed</th><th>Failed</th><th>Errored</th><th>Pass rate</th><th>Completed</th></tr>
{{- range .Rounds}}
<tr><td class="n">{{.Round}}</td><td><code>{{.Revision}}</code></td><td class="n">{{.Counts.Total}}</td><td class="n">{{.Counts.Passed}}</td><td class="n">{{.Counts.Failed}}</td><td class="n">{{.Counts.Errored}}</td><td class="n">{{or .PassRate "–"}}</td><td>{{if .CompletionTime}}{{.CompletionTime.UTC.Format "2006-01-02 15:04:05Z"}}{{else}}superseded{{end}}</td></tr>
{{- end}}
</table>
{{- end}}
</body>
</html>
`))
})
