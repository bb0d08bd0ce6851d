package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"sync"
)

// reportCSS is the report's only style. Its hash goes into the page's
// Content-Security-Policy, which forbids every other load: no script, font,
// image or frame, so the file reads the same offline and cannot call home.
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

// reportTemplate is parsed on first use: every command would pay for it at
// start-up.
var reportTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Parse(`<!DOCTYPE html>
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

<h2>Time line</h2>
<table id="timeline">
<tr><th>time</th><th>event</th></tr>
{{- range .R.Timeline}}
<tr class="event"><td>{{.Time}}</td><td>{{.What}}</td></tr>
{{- end}}
</table>

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
`))
})

// html renders report.html: one self-contained file.
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
		return nil, fmt.Errorf("bundle: report.html: %w", err)
	}
	return b.Bytes(), nil
}
