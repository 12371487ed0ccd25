package llamacpp

import (
	"flag"
	"sync"
	"syscall"
	"testing"

	"github.com/ollama/ollama/llama"

	"kvwin/engine"
)

// The fuzz targets run what a request's grammar or schema meets: kvwin's
// checks, then, for what they accept, llama.cpp's converter, its grammar
// parser and initialisation (the budget keeper's llama.NewGrammar and the
// sampler's common_sampler_cinit, where the crashes were) and a few steps
// of its stack advance. Whatever the input, nothing may crash, and under
// fuzzing the process runs with an address-space limit, so a blowup in
// llama.cpp is an allocation failure the fuzzer reports.

var fuzzModel struct {
	once  sync.Once
	model *llama.Model
	err   error
}

// fuzzSetup loads the test model once per process and, when fuzzing,
// limits the address space to 8 GiB.
func fuzzSetup(t *testing.T) *llama.Model {
	fuzzModel.once.Do(func() {
		if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
			lim := &syscall.Rlimit{Cur: 8 << 30, Max: 8 << 30}
			if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
				fuzzModel.err = err
				return
			}
		}
		backendInit.Do(llama.BackendInit)
		fuzzModel.model, fuzzModel.err = llama.LoadModelFromFile(tinyPath, llama.ModelParams{UseMmap: true, Progress: func(float32) {}})
	})
	if fuzzModel.err != nil {
		t.Fatal(fuzzModel.err)
	}
	return fuzzModel.model
}

// exercise initialises g as the engine does and walks a few characters
// through it, always one the grammar allows.
func exercise(t *testing.T, m *llama.Model, g string) {
	var ids []uint32
	var pieces []string
	for c := byte(' '); c <= '~'; c++ {
		ids, pieces = append(ids, uint32(c)), append(pieces, string(c))
	}
	const eog = 0x7f
	gr := llama.NewGrammar(g, ids, pieces, []int32{eog})
	if gr == nil {
		return // llama.cpp refused it: a 400, not a crash
	}
	defer gr.Free()
	for range 8 {
		td := make([]llama.TokenData, len(ids))
		for i, id := range ids {
			td[i] = llama.TokenData{ID: int32(id)}
		}
		gr.Apply(td)
		next := -1
		for _, d := range td {
			if d.Logit > -1e30 {
				next = int(d.ID)
				break
			}
		}
		if next < 0 {
			break
		}
		gr.Accept(int32(next))
	}
	s, err := llama.NewSamplingContext(m, llama.SamplingParams{TopK: 40, TopP: 0.9, TypicalP: 1, Temp: 0.8, Seed: 1, Grammar: g})
	if err == nil && s == nil {
		t.Fatal("sampler: nil without an error")
	}
}

func FuzzSchemaGrammar(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":12}},"required":["a"]}`,
		`{"type":"string","maxLength":1000000}`,
		`{"type":"string","pattern":"^((a|b){0,100}){0,100}$"}`,
		`{"type":"string","pattern":"^[a-z]{3,8}$"}`,
		`{"type":"string","pattern":"` + nested("(", "a", ")", 300) + `"}`,
		nested(`{"type":"array","items":`, `{"type":"string"}`, `}`, 600),
		`{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"type":"string"}}}`,
		`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}},"$ref":"#/$defs/n"}`,
		enumSchema(40),
		`{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":5}`,
		`{"anyOf":[{"type":"null"},{"type":"integer","minimum":-5,"maximum":300}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		m := fuzzSetup(t)
		g, _, err := outputGrammar(&engine.Output{Schema: schema, Prefix: "<x>", Suffix: "</x>"})
		if err != nil {
			return
		}
		exercise(t, m, g)
	})
}

func FuzzRawGrammar(f *testing.F) {
	for _, g := range []string{
		`root ::= "yes" | "no"`,
		`root ::= [a-z]{3,8} ("," [a-z]{3,8})*`,
		`root ::= ` + nested("(", `"a"`, ")", 300),
		`root ::= (("a" | "b"){0,100}){0,100}`,
		`root ::= "a"{0,4294967297}`,
		`root ::= root "a" | "b"`,
		"root ::= x\nx ::= \"(\" x \")\" | \"\"\n",
		`root ::= ("a"?){0,50}`,
		chain(50),
	} {
		f.Add(g)
	}
	f.Fuzz(func(t *testing.T, g string) {
		m := fuzzSetup(t)
		if err := checkRawGrammar(g); err != nil {
			return
		}
		exercise(t, m, g)
	})
}
