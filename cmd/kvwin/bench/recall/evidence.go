package recall

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// evidenceIDs reads an evidence field: a list of strings, or one string,
// each split on ';', ',' and spaces.
func evidenceIDs(raw json.RawMessage) []string {
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

// normalID normalises a dialogue id by the README's rules: "D:11:26" means
// "D11:26" and "D30:05" means "D30:5".
func normalID(id string) (string, bool) {
	m := diaID.FindStringSubmatch(strings.TrimSpace(id))
	if m == nil {
		return "", false
	}
	s, _ := strconv.Atoi(m[1])
	t, _ := strconv.Atoi(m[2])
	return "D" + strconv.Itoa(s) + ":" + strconv.Itoa(t), true
}

// resolve maps ids to turn indexes, dropping those that resolve to no turn
// and duplicates.
func resolve(ids []string, index map[string]int) []int {
	var out []int
	seen := map[int]bool{}
	for _, id := range ids {
		n, ok := normalID(id)
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
