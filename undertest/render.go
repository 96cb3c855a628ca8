package undertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

// funcs are the template functions every profile template may use.
var funcs = template.FuncMap{
	"y":    yamlScalar,
	"json": jsonString,
	"dur":  deployment.FormatDuration,
	"ms":   func(d time.Duration) int64 { return d.Milliseconds() },
	"secs": func(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) },
	// envref is a ${NAME} reference, for gateways that expand their environment in config.
	"envref": func(name string) string { return "${" + name + "}" },
	// port and host split a host:port fact (a gateway that takes its port as a flag).
	"port": func(hp string) string { _, p, _ := net.SplitHostPort(hp); return p },
	"host": func(hp string) string { h, _, _ := net.SplitHostPort(hp); return h },
	// windowunit is a window as envoy ratelimit's unit (second, minute, hour, day); a window
	// that is none of them is an error (the profile's expect.admission.windows stops such a run
	// before it renders).
	"windowunit": windowUnit,
}

func windowUnit(d time.Duration) (string, error) {
	switch d {
	case time.Second:
		return "second", nil
	case time.Minute:
		return "minute", nil
	case time.Hour:
		return "hour", nil
	case 24 * time.Hour:
		return "day", nil
	}
	return "", fmt.Errorf("a window of %s is no rate-limit unit (second, minute, hour, day)", d)
}

func parseTemplate(s string) (*template.Template, error) {
	return template.New("").Option("missingkey=error").Funcs(funcs).Parse(s)
}

// Render renders the gateway's config file for f, with only the scenario rules the profile
// can express (capabilities.rules).
func (p *Profile) Render(f Facts) ([]byte, error) {
	f.ScenarioRules = p.expressible(f)
	var buf bytes.Buffer
	if err := p.tmpl.Execute(&buf, f); err != nil {
		return nil, fmt.Errorf("rendering the config of %s (gateway profile %s): %w", f.Name, p.Name, err)
	}
	return buf.Bytes(), nil
}

// Argv renders the gateway's command line for f (f.ConfigPath set).
func (p *Profile) Argv(f Facts) ([]string, error) {
	out := make([]string, len(p.argv))
	for i, t := range p.argv {
		var b strings.Builder
		if err := t.Execute(&b, f); err != nil {
			return nil, fmt.Errorf("rendering launch.argv[%d] of gateway profile %s: %w", i, p.Name, err)
		}
		out[i] = b.String()
	}
	return out, nil
}

// Env is the gateway's environment: secrets (the harness's NAME=value list of passwords and
// the store URL) followed by the profile's own variables, rendered for f; a profile value may
// copy a secret with $NAME. Secret: never log it.
func (p *Profile) Env(f Facts, secrets []string) ([]string, error) {
	lookup := map[string]string{}
	names := make([]string, 0, len(secrets))
	for _, kv := range secrets {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
		names = append(names, k)
	}
	vars, err := p.EnvVars(f, names)
	if err != nil {
		return nil, err
	}
	out := append([]string(nil), secrets...)
	for _, ev := range vars {
		var b strings.Builder
		for _, part := range ev.Parts {
			if part.Copy != "" {
				b.WriteString(lookup[part.Copy])
			} else {
				b.WriteString(part.Text)
			}
		}
		out = append(out, ev.Name+"="+b.String())
	}
	return out, nil
}

// EnvVar is one of the profile's own variables with the run's variables it copies left as
// references, for an engine that passes secrets by reference (a Kubernetes Secret): its value
// is the concatenation of Parts.
type EnvVar struct {
	Name  string
	Parts []EnvPart
}

// EnvPart is literal Text, or a Copy of the run's variable of that name.
type EnvPart struct {
	Text string
	Copy string
}

// CopiesOnly reports the variable a value copies whole ($NAME and nothing else), if it does.
func (v EnvVar) CopiesOnly() (string, bool) {
	if len(v.Parts) == 1 && v.Parts[0].Copy != "" {
		return v.Parts[0].Copy, true
	}
	return "", false
}

// EnvVars renders the profile's own variables for f, in name order, each $NAME a reference to
// one of the run's variables named in known (an error names any other).
func (p *Profile) EnvVars(f Facts, known []string) ([]EnvVar, error) {
	var out []EnvVar
	for _, k := range sortedKeys(p.Launch.Env) {
		var b strings.Builder
		if err := p.env[k].Execute(&b, f); err != nil {
			return nil, fmt.Errorf("rendering launch.env.%s of gateway profile %s: %w", k, p.Name, err)
		}
		if strings.ContainsRune(b.String(), 0) {
			return nil, fmt.Errorf("launch.env.%s of gateway profile %s renders a NUL character: remove it", k, p.Name)
		}
		// Each reference becomes NUL<name>NUL, so splitting at NUL alternates text and names.
		var missing string
		marked := os.Expand(b.String(), func(name string) string {
			if !slices.Contains(known, name) && missing == "" {
				missing = name
			}
			return "\x00" + name + "\x00"
		})
		if missing != "" {
			return nil, fmt.Errorf("launch.env.%s of gateway profile %s copies $%s, which the run does not set: use one of the run's variables", k, p.Name, missing)
		}
		ev := EnvVar{Name: k}
		for i, seg := range strings.Split(marked, "\x00") {
			switch {
			case i%2 == 1:
				ev.Parts = append(ev.Parts, EnvPart{Copy: seg})
			case seg != "":
				ev.Parts = append(ev.Parts, EnvPart{Text: seg})
			}
		}
		if len(ev.Parts) == 0 {
			ev.Parts = []EnvPart{{Text: ""}}
		}
		out = append(out, ev)
	}
	return out, nil
}

// ReadyURL is the gateway's readiness URL, given its data and admin base URLs.
func (p *Profile) ReadyURL(dataURL, adminURL string) string {
	base := adminURL
	if p.Readiness.Listener == ListenerData {
		base = dataURL
	}
	return strings.TrimRight(base, "/") + p.Readiness.Path
}

// plainScalar matches strings that YAML reads back verbatim as plain (unquoted) strings.
var plainScalar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/@-]*(:[A-Za-z0-9._/@-]+)*$`)

// yamlScalar renders s as a YAML string: plain when that is unambiguous, double-quoted
// otherwise (a JSON string is a valid YAML double-quoted scalar).
func yamlScalar(s string) string {
	if plainScalar.MatchString(s) {
		if _, err := strconv.ParseFloat(s, 64); err != nil && !yamlKeyword(s) {
			return s
		}
	}
	return jsonString(s)
}

func yamlKeyword(s string) bool {
	switch s {
	case "true", "false", "yes", "no", "on", "off", "null", "True", "False", "Null", "TRUE", "FALSE", "NULL", "y", "n", "Y", "N":
		return true
	}
	return false
}

// jsonString renders s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
