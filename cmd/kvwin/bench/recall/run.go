package recall

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"kvwin/window"
)

// Run is a kvwin bench recall run (its flags): the data, then what Evaluate
// is asked.
type Run struct {
	// Format is locomo (Data, a LoCoMo-format file) or generated (a
	// synthetic conversation of Turns turns per seed of Seeds).
	Format, Data string
	Seeds        []int64
	Turns        int
	// Family is the generated conversations' family (Families; default
	// FamilyTeam).
	Family string
	// Options are Evaluate's; Progress is set by Do.
	Options Options
	// JSON also prints the rows as one JSON array on stdout.
	JSON bool
}

// Do loads the conversations, evaluates them, writes the table and
// progress to stderr and, with JSON, the rows to stdout.
func (r Run) Do(ctx context.Context, stdout, stderr io.Writer) error {
	convs, err := r.load()
	if err != nil {
		return err
	}
	data := r.Data
	if data == "" {
		data = fmt.Sprintf("generated seeds %v", r.Seeds)
		if r.Family != "" && r.Family != FamilyTeam {
			data = fmt.Sprintf("generated %s seeds %v", r.Family, r.Seeds)
		}
	}
	questions, turns := 0, 0
	for _, c := range convs {
		questions += len(c.Questions)
		turns += len(c.Turns)
	}
	fmt.Fprintf(stderr, "recall: %s: %d conversations, %d turns, %d questions\n", data, len(convs), turns, questions)
	last := time.Now()
	opt := r.Options
	opt.Progress = func(p Progress) {
		if p.Done == p.Questions || time.Since(last) > 2*time.Second {
			last = time.Now()
			fmt.Fprintf(stderr, "recall: %s at %d: %d/%d questions\n", p.Policy, p.Budget, p.Done, p.Questions)
		}
	}
	rows, err := Evaluate(ctx, convs, opt)
	if err != nil {
		return err
	}
	if err := WriteTable(stderr, rows); err != nil {
		return err
	}
	if r.JSON {
		return json.NewEncoder(stdout).Encode(rows)
	}
	return nil
}

// load loads the conversations to evaluate.
func (r Run) load() ([]Conversation, error) {
	switch r.Format {
	case "generated":
		if r.Turns < 100 {
			return nil, fmt.Errorf("--turns %d: want at least 100", r.Turns)
		}
		family := r.Family
		if family == "" {
			family = FamilyTeam
		}
		if !slices.Contains(Families(), family) {
			return nil, fmt.Errorf("--family %q: want one of %v", r.Family, Families())
		}
		var convs []Conversation
		for _, seed := range r.Seeds {
			convs = append(convs, GenerateFamily(family, seed, r.Turns))
		}
		return convs, nil
	case "locomo":
		if r.Data == "" {
			return nil, fmt.Errorf("--data is required with --format locomo")
		}
		f, err := os.Open(r.Data)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		convs, err := LoadLoCoMo(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Data, err)
		}
		return convs, nil
	}
	return nil, fmt.Errorf("--format %q: want locomo or generated", r.Format)
}

// ParsePolicies checks policy names (white space trimmed) against
// Policies; an unknown one is window.ErrUnknownPolicy.
func ParsePolicies(vals []string) ([]string, error) {
	known := map[string]bool{}
	for _, p := range Policies() {
		known[p] = true
	}
	var out []string
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if !known[v] {
			return nil, fmt.Errorf("--policies %q: %w", v, window.ErrUnknownPolicy)
		}
		out = append(out, v)
	}
	return out, nil
}
