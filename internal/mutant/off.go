//go:build !quotaqual_mutants

package mutant

// Built reports whether this binary carries the mutants (built with -tags quotaqual_mutants).
const Built = false

// Arm does nothing outside the mutants build: QUOTAQUAL_MUTANT is not even read.
func Arm(identity string) error { return nil }

// Is is always false outside the mutants build; the compiler removes the guarded code.
func Is(Name) bool { return false }
