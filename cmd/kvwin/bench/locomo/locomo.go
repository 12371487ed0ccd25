// Package locomo reads conversations in LoCoMo's JSON format, the one
// reader of the format for every bench (ttft replays its turns, recall also
// its questions): an array of samples, or one sample, each a conversation
// of numbered sessions of {speaker, dia_id, text} turns and a list of
// questions whose evidence names turns by dialogue id. The counting
// conventions are in ../shared/data/README.md.
package locomo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Turn is one turn of a sample's sessions, as the file has it.
type Turn struct {
	Speaker string `json:"speaker"`
	DiaID   string `json:"dia_id"`
	Text    string `json:"text"`
}

// QA is one question of a sample. Evidence and Stale are the dialogue ids
// of its evidence and superseded evidence as written (see EvidenceIDs);
// NormalID compares them with the turns' ids.
type QA struct {
	Question string
	Category int
	Evidence []string
	Stale    []string
}

// Sample is one conversation of a file.
type Sample struct {
	ID string
	// SpeakerA and SpeakerB are the conversation's speaker_a and
	// speaker_b; empty when the file has none.
	SpeakerA, SpeakerB string
	// Turns are the sessions' turns in numeric session order (session_2
	// before session_10), every turn as written, empty texts included:
	// what a bench skips is the bench's rule.
	Turns []Turn
	QA    []QA
}

type rawSample struct {
	SampleID     string                     `json:"sample_id"`
	Conversation map[string]json.RawMessage `json:"conversation"`
	QA           []struct {
		Question string          `json:"question"`
		Evidence json.RawMessage `json:"evidence"`
		Stale    json.RawMessage `json:"stale_evidence"`
		Category int             `json:"category"`
	} `json:"qa"`
}

var sessionKey = regexp.MustCompile(`^session_(\d+)$`)

// ErrDecode is returned (wrapped) for a file that is neither an array of
// samples nor one sample.
var ErrDecode = errors.New("decode locomo (want an array of samples or one sample)")

// Read reads a LoCoMo-format file: an array of samples, or one sample (an
// object with a "conversation"). An empty array is no error: zero samples.
func Read(r io.Reader) ([]Sample, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("locomo: read: %w", err)
	}
	var raws []rawSample
	if err := json.Unmarshal(data, &raws); err != nil {
		var one rawSample
		if err2 := json.Unmarshal(data, &one); err2 != nil || one.Conversation == nil {
			return nil, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		raws = []rawSample{one}
	}
	out := make([]Sample, 0, len(raws))
	for i, raw := range raws {
		s, err := convert(raw)
		if err != nil {
			return nil, fmt.Errorf("locomo: sample %d (%q): %w", i, raw.SampleID, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func convert(raw rawSample) (Sample, error) {
	s := Sample{ID: raw.SampleID}
	for key, dst := range map[string]*string{"speaker_a": &s.SpeakerA, "speaker_b": &s.SpeakerB} {
		if v, ok := raw.Conversation[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return s, fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	type session struct {
		n     int
		turns []Turn
	}
	var sessions []session
	for k, v := range raw.Conversation {
		m := sessionKey.FindStringSubmatch(k)
		if m == nil {
			continue // speaker_a, session_N_date_time, …
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
		var ts []Turn
		if err := json.Unmarshal(v, &ts); err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
		sessions = append(sessions, session{n, ts})
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].n < sessions[j].n })
	for _, ss := range sessions {
		s.Turns = append(s.Turns, ss.turns...)
	}
	for _, q := range raw.QA {
		s.QA = append(s.QA, QA{Question: q.Question, Category: q.Category,
			Evidence: EvidenceIDs(q.Evidence), Stale: EvidenceIDs(q.Stale)})
	}
	return s, nil
}

// EvidenceIDs reads an evidence field: a list of strings, or one string,
// each split on ';', ',' and white space; nil for anything else.
func EvidenceIDs(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var parts []string
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var one string
		if json.Unmarshal(raw, &one) != nil {
			return nil
		}
		list = []string{one}
	}
	for _, s := range list {
		parts = append(parts, strings.FieldsFunc(s, func(r rune) bool {
			return r == ';' || r == ',' || r == ' ' || r == '\t' || r == '\n'
		})...)
	}
	return parts
}

var diaID = regexp.MustCompile(`^D:?(\d+):(\d+)$`)

// NormalID normalises a dialogue id by the data README's rules: "D:11:26"
// means "D11:26" and "D30:05" means "D30:5"; false for what is no
// dialogue id.
func NormalID(id string) (string, bool) {
	m := diaID.FindStringSubmatch(strings.TrimSpace(id))
	if m == nil {
		return "", false
	}
	s, _ := strconv.Atoi(m[1])
	t, _ := strconv.Atoi(m[2])
	return "D" + strconv.Itoa(s) + ":" + strconv.Itoa(t), true
}
