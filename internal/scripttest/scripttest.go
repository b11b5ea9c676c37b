// Package scripttest runs the project's scenario scripts: text files in a
// package's testdata/ that drive a component on a manual clock and record
// what it printed, in the style of CockroachDB's datadriven tests:
//
//	# comment (kept on -rewrite)
//	command key=value ...
//	----
//	expected output
//	<blank line>
//
// A package's test gives the commands their meaning (an exec function per
// file); this package parses the files, compares the output and, with
// -rewrite, writes the actual output back.
package scripttest

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata scripts with the actual output")

// Rewriting reports whether -rewrite was given.
func Rewriting() bool { return *rewrite }

// Exec runs one command; line is its line number in the file, for errors.
type Exec func(line int, cmd string) []string

// RunAll runs every file matching glob as a subtest named after the file;
// start builds a fresh Exec for each file (and may register cleanups on
// its t).
func RunAll(t *testing.T, glob string, start func(t *testing.T, path string) Exec) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts match %s: %v", glob, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { Run(t, f, start(t, f)) })
	}
}

type block struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	line int
	want []string
}

func parse(t *testing.T, path string) (blocks []block, trailer []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	i := 0
	for i < len(lines) {
		var pre []string
		for i < len(lines) && (strings.TrimSpace(lines[i]) == "" || strings.HasPrefix(lines[i], "#")) {
			pre = append(pre, lines[i])
			i++
		}
		if i == len(lines) {
			return blocks, pre
		}
		b := block{pre: pre, cmd: lines[i], line: i + 1}
		i++
		if i >= len(lines) || lines[i] != "----" {
			t.Fatalf("%s:%d: command %q not followed by ----", path, b.line, b.cmd)
		}
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			b.want = append(b.want, lines[i])
			i++
		}
		if i < len(lines) {
			i++ // the blank line that ends the block
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// Run runs one script file through exec.
func Run(t *testing.T, path string, exec Exec) {
	t.Helper()
	blocks, trailer := parse(t, path)
	var out strings.Builder
	for _, b := range blocks {
		got := exec(b.line, b.cmd)
		if !*rewrite && !slices.Equal(got, b.want) {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, b.line, b.cmd,
				strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
		for _, l := range b.pre {
			out.WriteString(l + "\n")
		}
		out.WriteString(b.cmd + "\n----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
		out.WriteString("\n")
	}
	for _, l := range trailer {
		out.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Args parses key=value fields (a bare key maps to "").
func Args(fields []string) map[string]string {
	args := make(map[string]string)
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	return args
}
