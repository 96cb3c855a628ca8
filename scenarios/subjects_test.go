package scenarios

import (
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
)

// TestDeclaredSubjectsReachTheDeployment: the scenarios that send as many subjects declare them
// (Scenario.Subjects) and the deployment makes a user of each, the three applications first;
// a scenario that declares none gets the three applications only.
func TestDeclaredSubjectsReachTheDeployment(t *testing.T) {
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	list, err := Select([]string{"shared-budget", "lossy-store-link", SustainedLoadName})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment("run-20260101-abc", p, list)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string][]string{}
	for _, c := range d.Credentials {
		users[c.Scenario] = append(users[c.Scenario], c.Username)
	}
	for scenario, want := range map[string]int{"shared-budget": 3, "lossy-store-link": 3 + lossyStoreLinkSubjects, SustainedLoadName: 3 + sustainedLoadSubjects} {
		got := users[scenario]
		if len(got) != want {
			t.Errorf("%s: %d users, want %d", scenario, len(got), want)
			continue
		}
		if got[0] != "application-a@"+scenario {
			t.Errorf("%s: first user %s, want the first application", scenario, got[0])
		}
		if want > 3 && got[want-1] != deployment.LoadSubject(want-4)+"@"+scenario {
			t.Errorf("%s: last user %s, want its last load subject", scenario, got[want-1])
		}
	}
}
