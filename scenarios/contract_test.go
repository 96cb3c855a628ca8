package scenarios

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestContractPageNamesEveryScenario holds docs/contract.md to the scenarios: every scenario
// appears in some clause's "varied by" column, and every scenario named there exists — so the
// page cannot claim a check that was renamed away, nor leave a scenario's clause unsaid.
func TestContractPageNamesEveryScenario(t *testing.T) {
	b, err := os.ReadFile("../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, s := range All() {
		known[s.Name] = true
	}
	named := map[string]bool{}
	backticked := regexp.MustCompile("`([a-z0-9-]+)`")
	for i, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		// | dimension | varied by | judged against | black-box |
		if len(cells) != 6 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[2]) == "varied by" {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			if !known[m[1]] {
				t.Errorf("docs/contract.md:%d names scenario %q in its \"varied by\" column, which quotaqual scenarios does not list", i+1, m[1])
			}
			named[m[1]] = true
		}
	}
	for name := range known {
		if !named[name] {
			t.Errorf("docs/contract.md names scenario %s in no clause's \"varied by\" column: say which clause it varies", name)
		}
	}
}
