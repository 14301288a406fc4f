package sdk_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every exported name of the SDK's packages is documented.
func TestExportedNamesAreDocumented(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && !strings.Contains(path, "testdata") {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range dirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			hasPkgDoc := false
			for name, f := range pkg.Files {
				if f.Doc != nil {
					hasPkgDoc = true
				}
				for _, decl := range f.Decls {
					for _, missing := range undocumented(decl) {
						t.Errorf("%s: %s is not documented", name, missing)
					}
					checked++
				}
			}
			if !hasPkgDoc && !strings.HasPrefix(pkg.Name, "main") {
				t.Errorf("package %s (%s) has no package comment", pkg.Name, dir)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d declarations", checked)
	}
}

// undocumented lists the exported names that decl declares without a doc
// comment.
func undocumented(decl ast.Decl) []string {
	var out []string
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Doc != nil {
			return nil
		}
		if d.Recv != nil {
			recv := d.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok && !id.IsExported() {
				return nil
			}
			// Error, String, Unwrap and Is document themselves.
			switch d.Name.Name {
			case "Error", "String", "Unwrap", "Is":
				return nil
			}
		}
		return []string{d.Name.Name}
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() && s.Doc == nil && d.Doc == nil {
					out = append(out, s.Name.Name)
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}
