package reply

// Reasons lists the table's reasons, for the tests outside the package
// that write every row (engines_test.go).
func Reasons() []string {
	out := make([]string, 0, len(table))
	for k := range table {
		out = append(out, k)
	}
	return out
}
