// Command porcupine-check checks a recorded key-value history for linearizability with porcupine
// (github.com/anishathalye/porcupine, the checker of MIT 6.5840 and etcd's robustness tests), in a model where
// a key's version names one write: the versions of a key's writes grow with every write and never repeat, and a
// compare-and-set on a version holds only if nothing was written to the key since the write that version names.
//
// Usage: porcupine-check [-timeout 60s] HISTORY.json
//
// HISTORY.json is {"operations": [op, ...]}, each op:
//
//	{"client": 3, "key": "k0", "op": "put" | "delete" | "get", "value": <JSON, a put's>,
//	 "if_version": N (a conditional write; 0: only if absent) | null,
//	 "call": ns, "return": ns | null (null: the outcome is unknown: it may have taken effect, or not),
//	 "refused": true (a conditional write refused, certainly without effect),
//	 "version": N | null}
//
// where "version" is what the answer said: the version an acknowledged put gave the key, the version a get
// found (0: absent, and then "value" is null), or the version a refusal found (0: absent); null when unknown.
// A delete's answer names no version of the key.
//
// Exit status: 0 linearizable, 1 not linearizable (the offending key is printed), 2 bad input, 3 undecided
// (the timeout ran out).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type recorded struct {
	Client    int             `json:"client"`
	Key       string          `json:"key"`
	Op        string          `json:"op"`
	Value     json.RawMessage `json:"value"`
	IfVersion *int64          `json:"if_version"`
	Call      int64           `json:"call"`
	Return    *int64          `json:"return"`
	Refused   bool            `json:"refused"`
	Version   *int64          `json:"version"`
}

// input is what a client asked; output what it was told.
type input struct {
	key       string
	op        string
	value     string // canonical JSON of a put's value
	ifVersion int64  // -1: unconditional
}

type output struct {
	unknown bool   // no answer: it may or may not have taken effect
	refused bool   // a conditional write refused
	value   string // a get's value ("" when absent)
	version int64  // see recorded.Version; -1 when the answer did not say
}

// state is one key's register: its value, its version (unknown after a write of unknown outcome) and the
// highest version a write of it was given so far (the floor: a later write's version is above it).
type state struct {
	present bool
	value   string
	version int64
	known   bool
	floor   int64
}

// acknowledged holds, per key, the versions acknowledged puts were given: no other write has one of them.
var acknowledged = map[string]map[int64]bool{}

// holds says whether a conditional write's condition holds: 1 yes, 0 no, -1 unknown (a write of unknown
// outcome gave the key a version of its own, above the floor, that no answer revealed).
func holds(s state, in input) int {
	switch {
	case in.ifVersion == 0:
		return boolInt(!s.present)
	case !s.present:
		return 0
	case !s.known:
		if in.ifVersion > s.floor && !acknowledged[in.key][in.ifVersion] {
			return -1
		}
		return 0
	default:
		return boolInt(s.version == in.ifVersion)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// found: an answer (a get, a refusal) found the present key at `version`; the register after it, if possible.
func found(s state, key string, version int64) []interface{} {
	if !s.known {
		if version > s.floor && !acknowledged[key][version] {
			s.version, s.known, s.floor = version, true, version
			return []interface{}{s}
		}
		return nil
	}
	if s.version == version {
		return []interface{}{s}
	}
	return nil
}

func step(st, inp, outp interface{}) []interface{} {
	s, in, out := st.(state), inp.(input), outp.(output)
	if in.op == "get" {
		if out.version == 0 || out.value == "" {
			if s.present {
				return nil
			}
			return []interface{}{s}
		}
		if !s.present || s.value != out.value {
			return nil
		}
		if out.version < 0 {
			return []interface{}{s}
		}
		return found(s, in.key, out.version)
	}
	condition := 1
	if in.ifVersion >= 0 {
		condition = holds(s, in)
	}
	if out.refused {
		if condition == 1 {
			return nil
		}
		switch {
		case out.version < 0:
			return []interface{}{s}
		case out.version == 0:
			if s.present {
				return nil
			}
			return []interface{}{s}
		case !s.present:
			return nil
		default:
			return found(s, in.key, out.version)
		}
	}
	written := s
	if in.op == "put" {
		written.present, written.value = true, in.value
		if out.unknown || out.version < 0 {
			written.known = false // its own version, above the floor, unknown
		} else {
			written.version, written.known, written.floor = out.version, true, out.version
		}
	} else {
		written.present, written.value, written.version, written.known = false, "", 0, true
	}
	if out.unknown {
		if condition == 0 {
			return []interface{}{s}
		}
		return []interface{}{s, written}
	}
	if condition == 0 {
		return nil
	}
	if in.op == "put" && !out.unknown && out.version >= 0 && out.version <= s.floor {
		return nil // a version given to an earlier write of the key, or below it
	}
	return []interface{}{written}
}

func canonical(raw json.RawMessage) (string, error) {
	var decoded interface{}
	if err := json.Unmarshal(raw, &decoded); err != nil {
		return "", err
	}
	encoded, err := json.Marshal(decoded) // maps are encoded with sorted keys
	return string(encoded), err
}

func load(path string) ([]porcupine.Operation, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var history struct {
		Operations []recorded `json:"operations"`
	}
	if err := json.Unmarshal(data, &history); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ops []porcupine.Operation
	for index, r := range history.Operations {
		if r.Op != "put" && r.Op != "delete" && r.Op != "get" {
			return nil, fmt.Errorf("operation %d: unknown op %q", index, r.Op)
		}
		in := input{key: r.Key, op: r.Op, ifVersion: -1}
		if r.IfVersion != nil {
			in.ifVersion = *r.IfVersion
		}
		out := output{unknown: r.Return == nil, refused: r.Refused, version: -1}
		if r.Version != nil {
			out.version = *r.Version
		}
		if r.Op == "put" {
			if in.value, err = canonical(r.Value); err != nil {
				return nil, fmt.Errorf("operation %d: value: %w", index, err)
			}
		}
		if r.Op == "get" && out.version != 0 {
			if out.value, err = canonical(r.Value); err != nil {
				return nil, fmt.Errorf("operation %d: value: %w", index, err)
			}
		}
		if r.Op == "get" && out.unknown {
			continue // a read without an answer constrains nothing
		}
		ret := int64(math.MaxInt64)
		if r.Return != nil {
			ret = *r.Return
		}
		if r.Op == "put" && !out.unknown && !out.refused && out.version > 0 {
			if acknowledged[r.Key] == nil {
				acknowledged[r.Key] = map[int64]bool{}
			}
			acknowledged[r.Key][out.version] = true
		}
		ops = append(ops, porcupine.Operation{ClientId: r.Client, Input: in, Call: r.Call, Output: out, Return: ret})
	}
	return ops, nil
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		key := op.Input.(input).key
		byKey[key] = append(byKey[key], op)
	}
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	partitions := make([][]porcupine.Operation, 0, len(keys))
	for _, key := range keys {
		partitions = append(partitions, byKey[key])
	}
	return partitions
}

// Model is the key-value model where a version names one write.
var Model = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []interface{} { return []interface{}{state{known: true}} },
	Step:      step,
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up (exit 3) after this long")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: porcupine-check [-timeout 60s] HISTORY.json")
		os.Exit(2)
	}
	ops, err := load(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "porcupine-check:", err)
		os.Exit(2)
	}
	model := Model.ToModel()
	result, info := porcupine.CheckOperationsVerbose(model, ops, *timeout)
	keys := len(partitionByKey(ops))
	switch result {
	case porcupine.Ok:
		fmt.Printf("linearizable: %d operations on %d keys\n", len(ops), keys)
	case porcupine.Unknown:
		fmt.Printf("undecided: the check of %d operations did not finish within %s\n", len(ops), *timeout)
		os.Exit(3)
	default:
		fmt.Printf("not linearizable: %d operations on %d keys\n", len(ops), keys)
		for i, partition := range partitionByKey(ops) {
			longest := 0
			for _, linearization := range info.PartialLinearizations()[i] {
				if len(linearization) > longest {
					longest = len(linearization)
				}
			}
			if longest < len(partition) {
				fmt.Printf("key %s: at most %d of its %d operations linearize\n",
					partition[0].Input.(input).key, longest, len(partition))
			}
		}
		os.Exit(1)
	}
}
