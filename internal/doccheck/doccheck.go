// Package doccheck finds references in the repository's documentation to
// things that do not exist: files and directories, packages, sentry's
// subcommands and flags, metric names and policy keys.
//
// Docs are the README, docs/*.md, every README.md under deploy/ and e2e/,
// and every package's doc.go. Each is read as text; what counts as a
// reference is deliberately narrow, so that the check has no false
// positives and a failure always names a real mistake:
//
//   - a Markdown link's relative target (and its #anchor, against the
//     target's headings);
//   - a path with a slash whose first element exists next to the doc or at
//     the repository's root (proxy/doc.go, deploy/examples/), or any path
//     or bare name with a known extension (h2own.go, quick.yaml), which
//     must exist; a bare name is looked up under the doc's directory and,
//     for Markdown, anywhere in the repository; globs are expanded;
//   - "package X" and "`X` package", X a package of the module;
//   - sentry's command lines in code (a fenced block or a `span`):
//     "sentry SUBCOMMAND -flag ...", and a span that is a flag alone;
//   - a metric name, sentry_...; a trailing * makes it a prefix;
//   - a dotted policy key (admission.batch.queue_cap, apps[].tls.cert),
//     resolved by the policy decoder itself from the top level, an app, a
//     class or a rule;
//   - paths outside the repository (../shared, /work/).
//
// The test in this package runs Check over the real docs, and over a fake
// doc with one planted mistake of each kind.
package doccheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/sentry-proxy/sentry/policy"
)

// Module is the module path.
const Module = "github.com/sentry-proxy/sentry"

// Repo is what the docs may cite.
type Repo struct {
	// Root is the repository's root directory.
	Root string
	// Packages are the module's packages, relative to Root ("proxy/evloop").
	Packages map[string]bool
	// Commands maps each sentry subcommand to its flags (without the dash).
	Commands map[string]map[string]bool
	// Metrics are the metric names sentry registers.
	Metrics map[string]bool
	// PolicyKey reports whether a dotted key path from the policy's top
	// level ("apps[].admission.mode") exists. Nil: PolicyKeyExists.
	PolicyKey func(key string) bool

	rootKeys map[string]bool // isRootKey's answers
	keys     map[string]bool // policyKey's answers
	ignore   []string        // .gitignore's patterns, loaded once
	// Counts counts the references checked, by kind.
	Counts map[string]int
}

func (r *Repo) count(kind string) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
	r.Counts[kind]++
}

// ignored reports whether rel is git-ignored by the root .gitignore (the
// outputs of the bench and scenario tools, which a doc may name): its
// patterns are read as paths from the root ("/e2e/bench/out/") or as
// globs on a name ("*.prof").
func (r *Repo) ignored(rel string) bool {
	if r.ignore == nil {
		r.ignore = []string{}
		data, _ := os.ReadFile(filepath.Join(r.Root, ".gitignore"))
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				r.ignore = append(r.ignore, l)
			}
		}
	}
	rel = strings.TrimSuffix(rel, "/")
	for _, p := range r.ignore {
		if strings.HasPrefix(p, "/") {
			p = strings.TrimSuffix(strings.TrimPrefix(p, "/"), "/")
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return true
			}
		} else if ok, _ := filepath.Match(p, filepath.Base(rel)); ok {
			return true
		}
	}
	return false
}

// Problem is one reference to something that does not exist.
type Problem struct {
	File string // relative to Repo.Root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Load builds the Repo of the module at root: its packages (go list), the
// subcommands and flags of cmd/sentry and the metrics registered by the
// packages the sentry binary links.
func Load(root string) (*Repo, error) {
	pkgs, err := goList(root, "./...")
	if err != nil {
		return nil, err
	}
	r := &Repo{Root: root, Packages: map[string]bool{}}
	for _, p := range pkgs {
		if rel, ok := strings.CutPrefix(p, Module+"/"); ok {
			r.Packages[rel] = true
		}
	}
	if r.Commands, err = LoadCommands(filepath.Join(root, "cmd", "sentry")); err != nil {
		return nil, err
	}
	deps, err := goList(root, "-deps", "./cmd/sentry")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range deps {
		if p == Module {
			dirs = append(dirs, root)
		} else if rel, ok := strings.CutPrefix(p, Module+"/"); ok {
			dirs = append(dirs, filepath.Join(root, filepath.FromSlash(rel)))
		}
	}
	if r.Metrics, err = LoadMetrics(dirs); err != nil {
		return nil, err
	}
	return r, nil
}

func goList(root string, args ...string) ([]string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out)), nil
}

// Docs lists the docs under root that Check reads, relative to root.
func Docs(root string) ([]string, error) {
	var out []string
	if _, err := os.Stat(filepath.Join(root, "README.md")); err == nil {
		out = append(out, "README.md")
	}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "out" || strings.HasPrefix(d.Name(), "out-")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Name() == "doc.go":
		case strings.HasPrefix(rel, "docs/") && strings.Count(rel, "/") == 1 && strings.HasSuffix(rel, ".md"):
		case (strings.HasPrefix(rel, "deploy/") || strings.HasPrefix(rel, "e2e/")) && d.Name() == "README.md":
		default:
			return nil
		}
		out = append(out, rel)
		return nil
	})
	return out, err
}

// LoadCommands reads the subcommands and their flags from the Go files of
// cmd/sentry in dir: each flag.NewFlagSet("NAME", ...) is a subcommand,
// and the flags defined on that set in the same function are its flags;
// the string cases of realMain's switch are subcommands too (version).
func LoadCommands(dir string) (map[string]map[string]bool, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return nil, err
	}
	cmds := map[string]map[string]bool{}
	word := regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			sets := map[string]string{} // variable → subcommand
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					if len(n.Lhs) == 1 && len(n.Rhs) == 1 {
						if c, ok := n.Rhs[0].(*ast.CallExpr); ok && isSel(c.Fun, "flag", "NewFlagSet") && len(c.Args) > 0 {
							if name, ok := strLit(c.Args[0]); ok {
								if id, ok := n.Lhs[0].(*ast.Ident); ok {
									sets[id.Name] = name
									if cmds[name] == nil {
										cmds[name] = map[string]bool{}
									}
								}
							}
						}
					}
				case *ast.CaseClause:
					if fn.Name.Name == "realMain" {
						for _, e := range n.List {
							if s, ok := strLit(e); ok && word.MatchString(s) && cmds[s] == nil {
								cmds[s] = map[string]bool{}
							}
						}
					}
				}
				return true
			})
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := c.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok || sets[id.Name] == "" {
					return true
				}
				arg := 0
				switch sel.Sel.Name {
				case "Var", "TextVar", "BoolVar", "StringVar", "IntVar", "Int64Var", "UintVar", "Uint64Var", "Float64Var", "DurationVar":
					arg = 1
				case "String", "Bool", "Int", "Int64", "Uint", "Uint64", "Float64", "Duration", "Func", "BoolFunc":
				default:
					return true
				}
				if arg < len(c.Args) {
					if name, ok := strLit(c.Args[arg]); ok {
						cmds[sets[id.Name]][name] = true
					}
				}
				return true
			})
		}
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no subcommands found in %s", dir)
	}
	return cmds, nil
}

// LoadMetrics reads the metric names registered in the Go files (not
// tests) of dirs: the Name of a prometheus.*Opts literal, a literal first
// argument of prometheus.NewDesc, and names made by a helper
// d := func(name ...) { prometheus.NewDesc(PREFIX+name, ...) } (or
// prometheus.BuildFQName("a", "b", name)) called as d("suffix", ...).
func LoadMetrics(dirs []string) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := parseDir(fset, dir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					if sel, ok := n.Type.(*ast.SelectorExpr); ok && isIdent(sel.X, "prometheus") && strings.HasSuffix(sel.Sel.Name, "Opts") {
						for _, e := range n.Elts {
							if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
								if s, ok := strLit(kv.Value); ok && s != "" {
									out[s] = true
								}
							}
						}
					}
				case *ast.CallExpr:
					if isSel(n.Fun, "prometheus", "NewDesc") && len(n.Args) > 0 {
						if s, ok := strLit(n.Args[0]); ok {
							out[s] = true
						}
					}
				case *ast.FuncDecl:
					if n.Body != nil {
						helperNames(n.Body, out)
					}
				}
				return true
			})
		}
	}
	return out, nil
}

// helperNames finds d := func(name string, ...) {...NewDesc(PREFIX+name...)}
// in body and adds PREFIX+S for every call d("S", ...) in body.
func helperNames(body *ast.BlockStmt, out map[string]bool) {
	prefixes := map[string]string{}
	ast.Inspect(body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		id, ok := as.Lhs[0].(*ast.Ident)
		lit, ok2 := as.Rhs[0].(*ast.FuncLit)
		if !ok || !ok2 || len(lit.Type.Params.List) == 0 || len(lit.Type.Params.List[0].Names) == 0 {
			return true
		}
		param := lit.Type.Params.List[0].Names[0].Name
		ast.Inspect(lit.Body, func(m ast.Node) bool {
			c, ok := m.(*ast.CallExpr)
			if !ok || !isSel(c.Fun, "prometheus", "NewDesc") || len(c.Args) == 0 {
				return true
			}
			switch a := c.Args[0].(type) {
			case *ast.Ident:
				if a.Name == param {
					prefixes[id.Name] = ""
				}
			case *ast.BinaryExpr:
				if s, ok := strLit(a.X); ok && isIdent(a.Y, param) && a.Op == token.ADD {
					prefixes[id.Name] = s
				}
			case *ast.CallExpr:
				if isSel(a.Fun, "prometheus", "BuildFQName") && len(a.Args) == 3 && isIdent(a.Args[2], param) {
					ns, ok1 := strLit(a.Args[0])
					sub, ok2 := strLit(a.Args[1])
					if ok1 && ok2 {
						prefixes[id.Name] = ns + "_" + sub + "_"
					}
				}
			}
			return true
		})
		return true
	})
	if len(prefixes) == 0 {
		return
	}
	ast.Inspect(body, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || len(c.Args) == 0 {
			return true
		}
		id, ok := c.Fun.(*ast.Ident)
		if !ok {
			return true
		}
		p, ok := prefixes[id.Name]
		if !ok {
			return true
		}
		if s, ok := strLit(c.Args[0]); ok {
			out[p+s] = true
		}
		return true
	})
}

func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isSel(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(s.X, x) && s.Sel.Name == sel
}

func strLit(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// PolicyKeyExists reports whether key, a dotted path from the policy's top
// level with [] after each list ("apps[].classes[].terminate.lower"), is a
// key the policy decoder knows. It asks the decoder: a document that sets
// key (to null) must give no "unknown key" error and no error that a list
// or a mapping was expected on the way.
func PolicyKeyExists(key string) bool {
	segs := strings.Split(key, ".")
	var b strings.Builder
	closers := ""
	for i, s := range segs {
		list := strings.HasSuffix(s, "[]")
		s = strings.TrimSuffix(s, "[]")
		if s == "" {
			return false
		}
		b.WriteString(`{"` + s + `":`)
		closers = "}" + closers
		if i == len(segs)-1 {
			if list {
				b.WriteString("[null]")
			} else {
				b.WriteString("null")
			}
			break
		}
		if list {
			b.WriteString("[")
			closers = "]" + closers
		}
	}
	b.WriteString(closers)
	_, err := policy.Parse("<doccheck>", []byte(b.String()))
	if err == nil {
		return true
	}
	msg := err.Error()
	return !strings.Contains(msg, "unknown key") && !kindMismatch.MatchString(msg)
}

var kindMismatch = regexp.MustCompile(`expected a (list|mapping)`)

// policyRoots are where a key written without its full path may start:
// the top level, an app, a class, a class's rule.
var policyRoots = []string{"", "apps[].", "apps[].classes[].", "apps[].classes[].rules[]."}

func (r *Repo) policyKey(key string) bool {
	if v, ok := r.keys[key]; ok {
		return v
	}
	f := r.PolicyKey
	if f == nil {
		f = PolicyKeyExists
	}
	v := f(key)
	if r.keys == nil {
		r.keys = map[string]bool{}
	}
	r.keys[key] = v
	return v
}

// firstKeys are the names a key can start with at one of policyRoots.
func (r *Repo) isRootKey(seg string) bool {
	if r.rootKeys == nil {
		r.rootKeys = map[string]bool{}
	}
	if v, ok := r.rootKeys[seg]; ok {
		return v
	}
	v := false
	for _, root := range policyRoots {
		if r.policyKey(root+seg) || r.policyKey(root+seg+"[]") {
			v = true
			break
		}
	}
	r.rootKeys[seg] = v
	return v
}

// Check returns the problems in the doc at rel (relative to r.Root), whose
// content is text.
func (r *Repo) Check(rel, text string) []Problem {
	c := &checker{r: r, rel: rel, dir: filepath.Dir(filepath.FromSlash(rel)), markdown: strings.HasSuffix(rel, ".md")}
	c.run(text)
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Line < c.out[j].Line })
	return c.out
}

type checker struct {
	r        *Repo
	rel, dir string
	markdown bool
	out      []Problem
	line     int
}

func (c *checker) addf(format string, args ...any) {
	c.out = append(c.out, Problem{File: c.rel, Line: c.line, Msg: fmt.Sprintf(format, args...)})
}

var (
	urlRE      = regexp.MustCompile(`[a-z][a-z0-9+.-]*://[^\s)>\]` + "`" + `"']*`)
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	spanRE     = regexp.MustCompile("`([^`]+)`")
	pathTokRE  = regexp.MustCompile(`[A-Za-z0-9_.*/$<>{}%~-]+`)
	metricRE   = regexp.MustCompile(`(^|[^A-Za-z0-9_/.-])(sentry_[a-z0-9_]+\*?)`)
	keyRE      = regexp.MustCompile(`(^|[^A-Za-z0-9_./$-])([a-z][a-z0-9_]*(?:\[\])?(?:\.[a-z][a-z0-9_]*(?:\[\])?)+)`)
	pkgRE      = regexp.MustCompile("(?i:package) `?([a-z][a-z0-9_/]*)`?")
	pkgAfterRE = regexp.MustCompile("`([a-z][a-z0-9_/]*)` package")
	// cmdRE finds a sentry command line where one starts: at the start (of
	// a line or a span, after a prompt or sudo), after a shell separator
	// or "=" (ExecReload=), or after "go run".
	cmdRE = regexp.MustCompile(`(?:^\s*(?:\$ |sudo |exec )?|[;&|(=]\s*|go run )(?:[A-Za-z0-9_./-]*/)?sentry +([a-z][a-z0-9-]*)(.*)`)
)

// fileExts are the extensions that make a token with a slash a file name.
// Of these, a bare name (no slash) is checked only with a codeExts one:
// bare YAML, Markdown, CSV or PNG names are as often placeholders
// (policy.yaml) or a tool's outputs (summary.md) as files of the
// repository.
var fileExts = map[string]bool{
	"go": true, "md": true, "yaml": true, "yml": true, "sh": true, "json": true, "txt": true,
	"py": true, "service": true, "logrotate": true, "csv": true, "svg": true, "png": true,
	"html": true, "mod": true, "sum": true,
}

var codeExts = map[string]bool{"go": true, "sh": true, "py": true, "service": true, "logrotate": true, "mod": true, "sum": true}

// pkgStop are words that follow "package" in prose without naming one.
var pkgStop = map[string]bool{
	"is": true, "starts": true, "imports": true, "layout": true, "doc": true, "docs": true,
	"and": true, "or": true, "the": true, "that": true, "of": true, "with": true, "main": true,
	"in": true, "a": true, "to": true, "it": true, "its": true, "names": true, "comment": true,
}

func (c *checker) run(text string) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fence, fenceLang := "", ""
	for sc.Scan() {
		c.line++
		line := sc.Text()
		code := false // the whole line is code
		if c.markdown {
			t := strings.TrimSpace(line)
			if fence != "" {
				if strings.HasPrefix(t, fence) {
					fence = ""
					continue
				}
				code = true
			} else if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				fence, fenceLang = t[:3], strings.TrimSpace(t[3:])
				continue
			}
		} else if strings.HasPrefix(line, "//\t") {
			code, fenceLang = true, ""
		}
		c.checkLine(line, code, fenceLang)
	}
}

func (c *checker) checkLine(line string, code bool, lang string) {
	if strings.Contains(line, "../shared") || strings.Contains(line, "/work/") {
		c.addf("cites a path outside the repository: %q", strings.TrimSpace(line))
	}
	if c.markdown && !code {
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			c.link(m[1])
		}
	}
	bare := urlRE.ReplaceAllString(line, " ")
	bare = linkRE.ReplaceAllString(bare, "] ")
	c.paths(bare)
	c.metrics(bare)
	c.keys(bare)
	c.packages(bare)
	// Commands: a fenced shell block, or a span.
	if code && (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console") {
		c.command(strings.TrimPrefix(line, "//\t"))
	}
	if !code {
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			c.command(m[1])
		}
	}
}

// command checks "sentry SUB -flag ..." in s, a span or a code line.
func (c *checker) command(s string) {
	m := cmdRE.FindStringSubmatch(s)
	if m == nil {
		return
	}
	sub, rest := m[1], m[2]
	c.r.count("command")
	flags, ok := c.r.Commands[sub]
	if !ok {
		c.addf("sentry has no subcommand %q", sub)
		return
	}
	if i := strings.IndexAny(rest, "|;#`>"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, "&&"); i >= 0 {
		rest = rest[:i]
	}
	for _, tok := range strings.Fields(rest) {
		tok = strings.TrimLeft(tok, "[(")
		if !strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "--") || len(tok) < 2 {
			continue
		}
		name := strings.TrimRight(tok[1:], "]),.")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		if name == "" || !unicode.IsLower(rune(name[0])) {
			continue
		}
		if name == "h" || name == "help" {
			continue
		}
		c.r.count("flag")
		if !flags[name] {
			c.addf("sentry %s has no flag -%s", sub, name)
		}
	}
}

func (c *checker) link(target string) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	path, anchor, _ := strings.Cut(target, "#")
	c.r.count("link")
	file := c.rel
	if path != "" {
		file = filepath.ToSlash(filepath.Join(c.dir, filepath.FromSlash(path)))
		if !c.exists(file) {
			c.addf("link to %s, which does not exist", target)
			return
		}
	}
	if anchor != "" && strings.HasSuffix(file, ".md") {
		if !anchors(filepath.Join(c.r.Root, filepath.FromSlash(file)))[anchor] {
			c.addf("link to %s: %s has no heading #%s", target, file, anchor)
		}
	}
}

func (c *checker) exists(rel string) bool {
	p := filepath.Join(c.r.Root, filepath.FromSlash(rel))
	if strings.ContainsAny(rel, "*?[") {
		m, _ := filepath.Glob(p)
		return len(m) > 0
	}
	_, err := os.Stat(p)
	return err == nil
}

// paths checks the file and directory names in s.
func (c *checker) paths(s string) {
	for _, tok := range pathTokRE.FindAllString(s, -1) {
		if strings.ContainsAny(tok, "$<>{}%~") {
			continue
		}
		tok = strings.TrimRight(tok, ".,:;-")
		tok = strings.TrimLeft(tok, "-.")
		if tok == "" || strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "*") {
			continue
		}
		if strings.HasPrefix(tok, Module+"/") || tok == Module {
			pkg := strings.TrimPrefix(strings.TrimPrefix(tok, Module), "/")
			pkg, _, _ = strings.Cut(pkg, "@")
			pkg = strings.TrimSuffix(pkg, "/...")
			if pkg != "" && !c.r.Packages[pkg] && !c.exists(pkg) {
				c.addf("no package %s", tok)
			}
			continue
		}
		base := tok[strings.LastIndexByte(tok, '/')+1:]
		ext := ""
		if i := strings.LastIndexByte(base, '.'); i > 0 {
			ext = base[i+1:]
		}
		known := fileExts[ext]
		if !strings.Contains(tok, "/") {
			if codeExts[ext] && !strings.Contains(base, "..") {
				c.r.count("file")
				if !c.findBare(base) {
					c.addf("no file named %s", base)
				}
			}
			continue
		}
		t := strings.TrimPrefix(tok, "./")
		first, _, _ := strings.Cut(t, "/")
		rel := ""
		switch {
		case strings.HasPrefix(t, "../"):
			rel = filepath.ToSlash(filepath.Join(c.dir, filepath.FromSlash(t)))
		case first != "" && !strings.ContainsAny(first, "*") && c.exists(filepath.ToSlash(filepath.Join(c.dir, first))) && c.dir != ".":
			rel = filepath.ToSlash(filepath.Join(c.dir, filepath.FromSlash(t)))
			if !c.exists(rel) && c.exists(first) && c.exists(t) {
				rel = t
			}
		case first != "" && c.exists(first):
			rel = t
		case known:
			rel = t
		default:
			continue // not in this repository: net/http, x/net/http2
		}
		if c.r.ignored(rel) {
			continue
		}
		c.r.count("path")
		if !c.exists(strings.TrimSuffix(rel, "/")) {
			c.addf("no file or directory %s", tok)
		}
	}
}

// findBare looks for a file named base (a glob allowed) under the doc's
// directory, then anywhere in the repository.
func (c *checker) findBare(base string) bool {
	return c.find(filepath.Join(c.r.Root, c.dir), base) || c.find(c.r.Root, base)
}

func (c *checker) find(dir, base string) bool {
	found := false
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipAll
		}
		if d.IsDir() && path != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if ok, _ := filepath.Match(base, d.Name()); ok {
			found = true
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

func (c *checker) metrics(s string) {
	for _, m := range metricRE.FindAllStringSubmatchIndex(s, -1) {
		name := s[m[4]:m[5]]
		end := m[5]
		if !strings.HasSuffix(name, "*") {
			name = strings.TrimRight(name, "_")
		}
		c.r.count("metric")
		if end < len(s) && s[end] == '.' && end+1 < len(s) && unicode.IsLetter(rune(s[end+1])) {
			continue // a file name: sentry_test.go
		}
		if strings.HasSuffix(name, "*") {
			prefix := strings.TrimSuffix(name, "*")
			ok := false
			for k := range c.r.Metrics {
				if strings.HasPrefix(k, prefix) {
					ok = true
					break
				}
			}
			if !ok {
				c.addf("no metric starts with %s", prefix)
			}
			continue
		}
		if c.r.Metrics[name] {
			continue
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !c.r.Metrics[base] {
			c.addf("no metric %s", name)
		}
	}
}

func (c *checker) keys(s string) {
	for _, m := range keyRE.FindAllStringSubmatchIndex(s, -1) {
		key := s[m[4]:m[5]]
		end := m[5]
		if end < len(s) && strings.ContainsRune("(/-", rune(s[end])) {
			continue
		}
		segs := strings.Split(key, ".")
		if fileExts[segs[len(segs)-1]] {
			continue
		}
		first := strings.TrimSuffix(segs[0], "[]")
		if !c.r.isRootKey(first) {
			continue
		}
		c.r.count("key")
		ok := false
		for _, root := range policyRoots {
			if c.r.policyKey(root + key) {
				ok = true
				break
			}
		}
		if !ok {
			c.addf("no policy key %s", key)
		}
	}
}

func (c *checker) packages(s string) {
	var names []string
	for _, m := range pkgRE.FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	for _, m := range pkgAfterRE.FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	for _, n := range names {
		n = strings.TrimRight(n, "/")
		if pkgStop[n] || n == "" {
			continue
		}
		c.r.count("package")
		if strings.Contains(n, "/") {
			first, _, _ := strings.Cut(n, "/")
			if !c.exists(first) {
				continue // not this module's: net/http
			}
			if !c.r.Packages[n] {
				c.addf("no package %s", n)
			}
			continue
		}
		ok := false
		for p := range c.r.Packages {
			if p == n || strings.HasSuffix(p, "/"+n) {
				ok = true
				break
			}
		}
		if !ok {
			c.addf("no package %s", n)
		}
	}
}

// anchors returns the GitHub anchors of the headings of the Markdown file.
func anchors(path string) map[string]bool {
	data, err := os.ReadFile(path)
	out := map[string]bool{}
	if err != nil {
		return out
	}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		slug := Slug(strings.TrimSpace(h))
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Slug is GitHub's anchor for a heading: lower case, letters, digits,
// spaces, hyphens and underscores kept, spaces made hyphens.
func Slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
