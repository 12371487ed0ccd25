package locomo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Texting restyles samples as a messaging app's chat, a stress set for
// rules developed on written dialogue (LoCoMo's turns are whole,
// punctuated paragraphs; real chat is short, informal messages). It is
// not real chat, and figures on it say how a rule holds up when the
// surface changes, not how it does on people's messages. Per turn, with
// the choices drawn from a PCG seeded by seed (so a seed is a fixed set):
//
//   - each sentence becomes its own message by the same speaker, numbered
//     anew within its session; evidence and stale evidence naming the turn
//     name all its messages;
//   - lower case; a trailing '.' or '!' dropped, a trailing '?' in half of
//     the messages;
//   - texting spellings ("u", "ur", "2", "thx", …) for half the words that
//     have one; a typo (two letters swapped, one dropped or one doubled) in
//     7% of the words of four or more letters;
//   - an emoji or an interjection ("lol", "haha") after a quarter of the
//     messages.
//
// Questions are kept as written: a benchmark's questions are an
// annotator's, not the chat's.
func Texting(samples []Sample, seed uint64) []Sample {
	rng := rand.New(rand.NewPCG(seed, 0x7465787469))
	out := make([]Sample, len(samples))
	for i, s := range samples {
		out[i] = textSample(s, rng)
	}
	return out
}

// textingSpellings are the texting spellings of common words.
var textingSpellings = map[string]string{
	"you": "u", "are": "r", "your": "ur", "because": "cuz", "okay": "ok",
	"really": "rly", "tonight": "tonite", "though": "tho", "thanks": "thx",
	"people": "ppl", "something": "smth", "probably": "prob", "great": "gr8",
	"please": "pls", "love": "luv", "see": "c", "to": "2", "for": "4",
	"be": "b", "what": "wat",
}

var textingTails = []string{"😂", "❤️", "👍", "🙏", "😊", "🔥", "😅", "🥺", "😭", "🎉", "lol", "haha", "omg", "lmao"}

// sentenceEnd splits a turn into sentences: after '.', '!' or '?' and
// white space.
var sentenceEnd = regexp.MustCompile(`[.!?]+\s+`)

func textSample(s Sample, rng *rand.Rand) Sample {
	out := Sample{ID: s.ID, SpeakerA: s.SpeakerA, SpeakerB: s.SpeakerB}
	ids := map[string][]string{} // normal id of a turn → its messages' ids
	count := map[int]int{}       // session → messages so far
	session := 1                 // a turn without a dialogue id stays in the session before it
	for _, t := range s.Turns {
		id, ok := NormalID(t.DiaID)
		if ok {
			session = sessionOf(id)
		}
		var mine []string
		for _, sentence := range sentences(t.Text) {
			count[session]++
			msg := fmt.Sprintf("D%d:%d", session, count[session])
			mine = append(mine, msg)
			out.Turns = append(out.Turns, Turn{Speaker: t.Speaker, DiaID: msg, Text: textMessage(sentence, rng)})
		}
		if ok {
			ids[id] = mine
		}
	}
	remap := func(evidence []string) []string {
		var out []string
		for _, e := range evidence {
			if id, ok := NormalID(e); ok {
				out = append(out, ids[id]...)
			}
		}
		return out
	}
	for _, q := range s.QA {
		out.QA = append(out.QA, QA{Question: q.Question, Category: q.Category,
			Evidence: remap(q.Evidence), Stale: remap(q.Stale)})
	}
	return out
}

// sessionOf is the session number of a normal dialogue id (NormalID).
func sessionOf(id string) int {
	n, _ := strconv.Atoi(id[1:strings.IndexByte(id, ':')])
	return n
}

// sentences splits text at sentence ends, keeping each end's punctuation;
// an empty text is one empty sentence (the turn stays a turn).
func sentences(text string) []string {
	var out []string
	rest := text
	for {
		loc := sentenceEnd.FindStringIndex(rest)
		if loc == nil {
			break
		}
		end := loc[0] + len(strings.TrimRightFunc(rest[loc[0]:loc[1]], unicode.IsSpace))
		if s := strings.TrimSpace(rest[:end]); s != "" {
			out = append(out, s)
		}
		rest = rest[loc[1]:]
	}
	if s := strings.TrimSpace(rest); s != "" || len(out) == 0 {
		out = append(out, s)
	}
	return out
}

// textMessage restyles one sentence (see Texting).
func textMessage(s string, rng *rand.Rand) string {
	words := strings.Fields(strings.ToLower(s))
	for i, w := range words {
		core := strings.TrimRightFunc(w, func(r rune) bool { return !unicode.IsLetter(r) && r != '\'' })
		tail := w[len(core):]
		if sp, ok := textingSpellings[core]; ok {
			if rng.Float64() < 0.5 {
				words[i] = sp + tail
			}
			continue
		}
		if len(core) >= 4 && isLetters(core) && rng.Float64() < 0.07 {
			words[i] = typo(core, rng) + tail
		}
	}
	out := strings.Join(words, " ")
	out = strings.TrimRight(out, ".!")
	if strings.HasSuffix(out, "?") && rng.Float64() < 0.5 {
		out = strings.TrimRight(out, "?")
	}
	if rng.Float64() < 0.25 {
		out = strings.TrimSpace(out + " " + textingTails[rng.IntN(len(textingTails))])
	}
	if strings.TrimSpace(out) == "" {
		return s // nothing but punctuation: kept as it was
	}
	return out
}

func isLetters(s string) bool {
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}

// typo swaps two adjacent letters of w, drops one or doubles one (w is
// ASCII letters, at least two).
func typo(w string, rng *rand.Rand) string {
	i := rng.IntN(len(w) - 1)
	switch k := rng.Float64(); {
	case k < 0.4:
		return w[:i] + w[i+1:i+2] + w[i:i+1] + w[i+2:]
	case k < 0.7:
		return w[:i] + w[i+1:]
	default:
		return w[:i+1] + w[i:]
	}
}

// Write returns samples as a LoCoMo-format JSON array: each sample's turns
// in sessions by their dialogue ids' session numbers (turns without one in
// session_1), its questions with evidence and stale_evidence lists.
func Write(samples []Sample) ([]byte, error) {
	type qa struct {
		Question string   `json:"question"`
		Evidence []string `json:"evidence"`
		Stale    []string `json:"stale_evidence,omitempty"`
		Category int      `json:"category"`
	}
	type sample struct {
		SampleID     string         `json:"sample_id"`
		Conversation map[string]any `json:"conversation"`
		QA           []qa           `json:"qa"`
	}
	out := make([]sample, 0, len(samples))
	for _, s := range samples {
		conv := map[string]any{}
		if s.SpeakerA != "" {
			conv["speaker_a"] = s.SpeakerA
		}
		if s.SpeakerB != "" {
			conv["speaker_b"] = s.SpeakerB
		}
		sessions := map[string][]Turn{}
		for _, t := range s.Turns {
			key := "session_1"
			if id, ok := NormalID(t.DiaID); ok {
				key = "session_" + strconv.Itoa(sessionOf(id))
			}
			sessions[key] = append(sessions[key], t)
		}
		for k, ts := range sessions {
			conv[k] = ts
		}
		x := sample{SampleID: s.ID, Conversation: conv, QA: []qa{}}
		for _, q := range s.QA {
			x.QA = append(x.QA, qa{Question: q.Question, Evidence: nonNil(q.Evidence), Stale: q.Stale, Category: q.Category})
		}
		out = append(out, x)
	}
	return json.Marshal(out)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
