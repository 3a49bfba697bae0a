// Package apicheck writes down a package's exported API, one declaration a
// line, sorted, for a golden file that a test compares (admission/api.txt):
// a change to a public surface must then be made on purpose, by
// regenerating the file (go test -update) in the same change.
//
// It reads the package's compiled export data (go list -export), so it sees
// exactly what importers see. Type aliases are spelled out: the fields and
// methods of an aliased type are part of the API of the package that
// exports the alias, wherever the type is defined.
package apicheck

import (
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// API returns the exported API of the package at import path pkg, which
// the go command run in the current directory must be able to build.
func API(pkg string) (string, error) {
	exports, err := exportFiles(pkg)
	if err != nil {
		return "", err
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("apicheck: no export data for %s", path)
		}
		return os.Open(f)
	})
	p, err := imp.Import(pkg)
	if err != nil {
		return "", fmt.Errorf("apicheck: %s: %w", pkg, err)
	}
	return Describe(p), nil
}

// exportFiles maps pkg and its dependencies to their export data files.
func exportFiles(pkg string) (map[string]string, error) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", pkg).Output()
	if err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return nil, fmt.Errorf("apicheck: go list %s: %w\n%s", pkg, err, ee.Stderr)
		}
		return nil, fmt.Errorf("apicheck: go list %s: %w", pkg, err)
	}
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			m[path] = file
		}
	}
	return m, nil
}

// Describe returns p's exported API, one declaration a line, sorted by name.
func Describe(p *types.Package) string {
	q := func(other *types.Package) string {
		if other == p {
			return ""
		}
		return other.Name()
	}
	var lines []string
	scope := p.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			lines = append(lines, fmt.Sprintf("const %s %s = %s", name, types.TypeString(o.Type(), q), o.Val().ExactString()))
		case *types.Var:
			lines = append(lines, fmt.Sprintf("var %s %s", name, types.TypeString(o.Type(), q)))
		case *types.Func:
			lines = append(lines, "func "+name+strings.TrimPrefix(types.TypeString(o.Type(), q), "func"))
		case *types.TypeName:
			lines = append(lines, typeLines(o, q)...)
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// typeLines describes a type: its definition (an alias and what it names,
// then that type's structure), and its exported methods.
func typeLines(o *types.TypeName, q types.Qualifier) []string {
	name := o.Name()
	t := o.Type()
	var lines []string
	if o.IsAlias() {
		t = types.Unalias(t)
		lines = append(lines, fmt.Sprintf("type %s = %s", name, types.TypeString(t, q)))
	}
	lines = append(lines, fmt.Sprintf("type %s %s", name, underlying(t.Underlying(), q)))
	for _, recv := range []types.Type{t, types.NewPointer(t)} {
		ms := types.NewMethodSet(recv)
		var ml []string
		for sel := range ms.Methods() {
			m := sel.Obj()
			if !m.Exported() {
				continue
			}
			if _, isPtr := recv.(*types.Pointer); isPtr && types.NewMethodSet(t).Lookup(m.Pkg(), m.Name()) != nil {
				continue // listed with the value receiver
			}
			sig := types.TypeString(m.Type(), q)
			r := name
			if _, isPtr := recv.(*types.Pointer); isPtr {
				r = "*" + name
			}
			ml = append(ml, fmt.Sprintf("method (%s) %s%s", r, m.Name(), strings.TrimPrefix(sig, "func")))
		}
		slices.Sort(ml)
		lines = append(lines, ml...)
	}
	return lines
}

// underlying writes a type's structure; a struct shows only its exported
// fields, and says so when it has others.
func underlying(t types.Type, q types.Qualifier) string {
	s, ok := t.(*types.Struct)
	if !ok {
		return types.TypeString(t, q)
	}
	var fs []string
	hidden := false
	for f := range s.Fields() {
		if !f.Exported() {
			hidden = true
			continue
		}
		if f.Embedded() {
			fs = append(fs, types.TypeString(f.Type(), q))
		} else {
			fs = append(fs, f.Name()+" "+types.TypeString(f.Type(), q))
		}
	}
	if hidden {
		fs = append(fs, "/* unexported fields */")
	}
	return "struct{" + strings.Join(fs, "; ") + "}"
}

// Golden compares pkg's exported API with the golden file (a path from
// the test's directory) and fails t where they differ; with update it
// rewrites the file instead. Each public package's TestAPI is this call.
func Golden(t testing.TB, pkg, golden string, update bool) {
	t.Helper()
	got, err := API(pkg)
	if err != nil {
		t.Fatal(err)
	}
	if update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (generate it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("the exported API of %s differs from %s; if the change is meant, run\n"+
			"\tgo test %s -run '^TestAPI$' -update\n\ngot:\n%s\nwant:\n%s", pkg, golden, pkg, got, want)
	}
}
