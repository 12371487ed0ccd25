// Package recall evaluates window policies offline: for each question of a
// conversation in LoCoMo's JSON format, it builds the window a server would
// send if the question were asked after the last turn, and measures how much
// of the question's evidence (and of its superseded, stale evidence) the
// window holds. Counting follows ../shared/data/README.md exactly.
package recall

import (
	"fmt"
	"io"
	"strings"

	"kvwin/cmd/kvwin/bench/locomo"
)

// Turn is one turn of a LoCoMo conversation: the format's one declaration,
// in package locomo.
type Turn = locomo.Turn

// Question is one qa entry, with its evidence resolved to turn indexes.
type Question struct {
	Question string
	Category int
	Evidence []int // indexes into Conversation.Turns
	Stale    []int
}

// Conversation is one LoCoMo sample: its turns in session order and the
// questions that count (category 5 and unresolvable ones are dropped).
type Conversation struct {
	ID                 string
	SpeakerA, SpeakerB string
	Turns              []Turn
	Questions          []Question
	Skipped            int // questions dropped by the counting conventions
}

// LoadLoCoMo reads a LoCoMo JSON file (locomo.Read: an array of samples,
// or one sample) as conversations: each sample's turns in session order,
// empty turns dropped, and its questions that count.
func LoadLoCoMo(r io.Reader) ([]Conversation, error) {
	samples, err := locomo.Read(r)
	if err != nil {
		return nil, err
	}
	var out []Conversation
	for i, s := range samples {
		c, err := convert(s)
		if err != nil {
			return nil, fmt.Errorf("locomo sample %d (%s): %w", i, s.ID, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("locomo: no conversations")
	}
	return out, nil
}

func convert(s locomo.Sample) (Conversation, error) {
	c := Conversation{ID: s.ID, SpeakerA: s.SpeakerA, SpeakerB: s.SpeakerB}
	index := map[string]int{}
	for _, t := range s.Turns {
		if strings.TrimSpace(t.Text) == "" {
			continue // an empty turn is not a message a client could send
		}
		if id, ok := locomo.NormalID(t.DiaID); ok {
			index[id] = len(c.Turns)
		}
		if c.SpeakerA == "" {
			c.SpeakerA = t.Speaker
		}
		c.Turns = append(c.Turns, t)
	}
	if len(c.Turns) == 0 {
		return c, fmt.Errorf("no turns")
	}
	for _, q := range s.QA {
		if q.Category == 5 {
			c.Skipped++
			continue
		}
		ev := resolve(q.Evidence, index)
		if len(ev) == 0 {
			c.Skipped++
			continue
		}
		c.Questions = append(c.Questions, Question{Question: q.Question, Category: q.Category,
			Evidence: ev, Stale: resolve(q.Stale, index)})
	}
	return c, nil
}

// resolve maps dialogue ids to turn indexes, dropping those that resolve
// to no turn and duplicates.
func resolve(ids []string, index map[string]int) []int {
	var out []int
	seen := map[int]bool{}
	for _, id := range ids {
		n, ok := locomo.NormalID(id)
		if !ok {
			continue
		}
		if i, ok := index[n]; ok && !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}
