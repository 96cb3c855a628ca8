// Package scenarios holds the qualification scenarios (All lists them). Each is a pure function of a
// topology (reached only through its HTTP endpoints and fault levers) and a request recorder,
// returning a verdict with the facts and assertions that decided it. A scenario never talks to
// a process directly.
//
// Rules every scenario follows:
//   - every check is recorded with what was expected and what was observed; nothing
//     short-circuits, so a failed check never hides the requests or checks after it;
//   - every HTTP exchange is recorded (Env.Chat), a real HTTP response is never retried, and a
//     transport failure is retried at most once with both attempts recorded;
//   - every wait has a deadline derived from the profile; nothing sleeps unbounded;
//   - provider attribution and "reached no provider" are counted at the providers, never
//     inferred from the gateway's answers.
package scenarios
