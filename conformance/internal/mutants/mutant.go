package main

// Mutant is one source-level bug planted in the reference server, as an
// implementer of the contract in another language might write it.
type Mutant struct {
	// Name is family/short-name; the family is one of idempotency,
	// persist, fencing, cleanup, recovery, adoption, checkpoints,
	// lifecycle.
	Name string
	// Doc says what the bug is and which promise of the contract it
	// breaks.
	Doc string
	// File is the path, from the repository's root, of the file the
	// mutant changes.
	File string
	// Old is replaced by New; Old occurs exactly once in File.
	Old, New string
}
