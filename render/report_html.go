package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"sync"
)

// reportCSS is the report's only style. Its hash goes into the page's
// Content-Security-Policy, which forbids every other load (script, font,
// image or frame), so the file reads the same offline and cannot call home.
const reportCSS = `
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #1b1b1b; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; } h3 { margin-top: 1.5em; }
table { border-collapse: collapse; width: 100%; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .3em .5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
code, pre { font: 12.5px/1.35 ui-monospace, monospace; }
pre { background: #f7f7f7; border: 1px solid #e2e2e2; padding: .5em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.verdict { font-size: 1.15em; font-weight: 600; padding: .6em .8em; border-left: 6px solid #2e7d32; background: #eef6ee; }
.verdict.dirty { border-color: #c62828; background: #fbeeee; }
.sev { display: inline-block; min-width: 5em; padding: .1em .4em; border-radius: 3px; color: #fff; font-weight: 600; text-align: center; }
.sev-critical { background: #6a1b9a; } .sev-high { background: #c62828; } .sev-medium { background: #ef6c00; }
.sev-low { background: #1565c0; } .sev-info { background: #607d8b; }
.fields th { width: 10em; background: none; font-weight: normal; color: #555; }
.add { color: #1b5e20; background: #e8f5e9; } .del { color: #b71c1c; background: #ffebee; }
.hunk { color: #4a148c; } .file { color: #555; font-weight: 600; }
.diff span { display: block; }
.notes { color: #6d4c00; }
@media print { pre { white-space: pre-wrap; } }
`

// reportTemplate is parsed on first use, or every command would pay for it
// at start-up.
var reportTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Parse(reportHTML))
})

// reportHTML is report.html's template, the page, its chart and its
// sections, with all data escaped by html/template.
const reportHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{.CSP}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.R.Title}}</title>
<style>{{.CSS}}</style>
</head>
<body>
<h1>{{.R.Title}}</h1>
<p class="verdict{{if .R.Groups}} dirty{{end}}" id="verdict">{{.R.Verdict}}</p>
{{- if .R.Lead}}
<p class="lead" id="lead">Lead: {{.R.Lead}}</p>
{{- end}}
{{- if .R.Notes}}
<ul class="notes" id="notes">
{{- range .R.Notes}}
<li>Note: {{.}}</li>
{{- end}}
</ul>
{{- end}}
<table class="fields" id="facts">
{{- range .Snaps}}
<tr><th>{{.Role}}</th><td><code>{{.ID}}</code> ({{.Label}}), taken {{.Time}}</td></tr>
{{- end}}
{{- range .R.Host}}
<tr><th>{{.Name}}</th><td><code>{{.Value}}</code></td></tr>
{{- end}}
<tr><th>written by</th><td>gpusnap <code>{{.R.Version}}</code>, run as uid {{.R.UID}}</td></tr>
</table>
{{- if .R.Blocks}}

<h2>What to do</h2>
{{- range .R.Blocks}}
<section class="block"{{if .Class}} data-class="{{.Class}}"{{end}}>
<h3><code>{{.Title}}</code></h3>
{{- if .Class}}
<table class="fields">
<tr><th>class</th><td class="class">{{.Class}}</td></tr>
<tr><th>next</th><td class="next">{{.Next}}</td></tr>
{{- range .Why}}
<tr><th>why</th><td class="why">{{.}}</td></tr>
{{- end}}
</table>
{{- end}}
<ul>
{{- range .Findings}}
<li><a href="#finding-{{.N}}">{{.N}}</a> <span class="sev sev-{{.Severity}}">{{.Severity}}</span> {{.Kind}}: {{.Text}}</li>
{{- end}}
</ul>
</section>
{{- end}}
{{- end}}

<h2>Time line</h2>
<table id="timeline">
<tr><th>time</th><th>event</th></tr>
{{- range .R.Timeline}}
<tr class="event"><td>{{.Time}}</td><td>{{.What}}</td></tr>
{{- end}}
</table>

{{- if .R.Charts}}

<h2>GPU use over the window</h2>
<p>SM utilization (red, 0-100%) and memory used (blue) in each interval watch sampled; a dashed line marks the start of
a process a finding names (from the window's start, for one started before).</p>
{{- range .R.Charts}}
<figure class="chart" id="chart-{{.ID}}" data-gpu="{{.GPU}}">
<figcaption><code>{{.GPU}}</code>{{if .Parent}} (on <code>{{.Parent}}</code>){{end}}{{if .Summary}}: {{.Summary}}{{end}}</figcaption>
<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 720 160" width="720" height="160" role="img" aria-label="utilization of {{.GPU}}">
<rect x="44" y="12" width="660" height="120" fill="#fafafa" stroke="#bbb"/>
<line x1="44" y1="24" x2="704" y2="24" stroke="#e0e0e0"/>
<line x1="44" y1="72" x2="704" y2="72" stroke="#e0e0e0"/>
<text x="40" y="16" font-size="10" text-anchor="end">100%</text>
<text x="40" y="28" font-size="10" text-anchor="end">90%</text>
<text x="40" y="76" font-size="10" text-anchor="end">50%</text>
<text x="40" y="134" font-size="10" text-anchor="end">0</text>
<path class="mem" d="{{.Mem}}" fill="none" stroke="#1565c0" stroke-width="1.2"/>
<path class="sm" d="{{.SM}}" fill="none" stroke="#c62828" stroke-width="1.5"/>
{{- range .Marks}}
<a href="#{{.Anchor}}"><line class="mark" x1="{{.X}}" y1="12" x2="{{.X}}" y2="132" stroke="#424242" stroke-dasharray="3 2"/><text x="{{.X}}" y="146" font-size="10" text-anchor="middle">{{.Label}}</text></a>
{{- end}}
<text x="44" y="158" font-size="10">{{.From}}</text>
<text x="704" y="158" font-size="10" text-anchor="end">{{.To}}</text>
<text x="374" y="158" font-size="10" text-anchor="middle">memory axis top: {{.MemTop}}</text>
</svg>
{{- if .Unmarked}}
<p>{{.Unmarked}} more processes with findings on this GPU are not marked.</p>
{{- end}}
</figure>
{{- end}}
{{- end}}

<h2>Findings</h2>
{{- if not .R.Groups}}
<p id="no-findings">None.</p>
{{- end}}
<table id="findings">
<tr><th>#</th><th>severity</th><th>kind</th><th>summary</th><th>process</th></tr>
{{- range .R.Groups}}{{range .Findings}}
<tr class="finding" data-kind="{{.Kind}}" data-severity="{{.Severity}}"><td><a href="#finding-{{.N}}">{{.N}}</a></td><td><span class="sev sev-{{.Severity}}">{{.Severity}}</span></td><td>{{.Kind}}</td><td>{{.Summary}}</td><td>{{range .Fields}}{{if eq .Name "process"}}<code>{{.Value}}</code>{{end}}{{end}}</td></tr>
{{- end}}{{end}}
</table>
{{- range .R.Groups}}
<h3>{{.Severity}} ({{len .Findings}})</h3>
{{- range .Findings}}
<section class="finding-detail" id="finding-{{.N}}">
<h4><span class="sev sev-{{.Severity}}">{{.Severity}}</span> {{.N}}. {{.Kind}}: {{.Summary}}</h4>
<table class="fields">
{{- range .Fields}}
<tr><th>{{.Name}}</th><td><code>{{.Value}}</code></td></tr>
{{- end}}
</table>
{{- if .Evidence}}
<pre class="evidence">{{range .Evidence}}{{.}}
{{end}}</pre>
{{- end}}
</section>
{{- end}}
{{- end}}

<h2>Processes involved</h2>
{{- if not .R.Processes}}
<p>None.</p>
{{- end}}
{{- range .R.Processes}}
<section class="process" id="process-{{.Key}}">
<h3><code>{{.Key}}</code> <code>{{.Comm}}</code></h3>
<table class="fields">
{{- range .Fields}}
<tr><th>{{.Name}}</th><td><code>{{.Value}}</code></td></tr>
{{- end}}
{{- if .RawDir}}
<tr><th>kernel text</th><td><code>{{.RawDir}}</code> (maps, status, cmdline, cgroup as captured)</td></tr>
{{- end}}
</table>
{{- if .DiffFile}}
<p>Maps diff (<code>{{.DiffFile}}</code>):</p>
<pre class="diff">{{range .Diff}}<span class="{{.Class}}">{{.Text}}</span>{{end}}</pre>
{{- else}}
<p>No maps diff.</p>
{{- end}}
</section>
{{- end}}
</body>
</html>
`

// html renders report.html, one self-contained file.
func (r *report) html() ([]byte, error) {
	sum := sha256.Sum256([]byte(reportCSS))
	data := struct {
		R     *report
		Snaps []snapRow
		CSS   template.CSS
		CSP   string
	}{
		R:     r,
		Snaps: []snapRow{r.Before, r.After},
		CSS:   template.CSS(reportCSS),
		CSP:   "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; base-uri 'none'; form-action 'none'",
	}
	var b bytes.Buffer
	if err := reportTemplate().Execute(&b, data); err != nil {
		return nil, fmt.Errorf("render: report.html: %w", err)
	}
	return b.Bytes(), nil
}
