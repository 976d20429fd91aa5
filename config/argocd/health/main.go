// Command argocd-health evaluates the RustQueue health check of docs/argocd.md the way Argo CD
// evaluates a `resource.customizations.health.<group>_<kind>` script: gopher-lua (Lua 5.1, the
// engine Argo CD embeds) with the standard libraries skipped except package, base and table
// (a custom script without `useOpenLibs`), the object as the global `obj`, a one-second
// deadline, and the returned table read as {status, message}; a status outside Argo CD's six
// health codes becomes Unknown.
//
// Usage:
//
//	argocd-health -doc docs/argocd.md [object.json ...]
//
// With no files it reads one object from stdin. For each object it prints one JSON line:
// {"file": ..., "status": ..., "message": ...}. A script error exits 1 and says where.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The health codes Argo CD accepts from a script (gitops-engine's HealthStatusCode).
var validCodes = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true,
	"Healthy": true, "Degraded": true, "Missing": true,
}

type health struct {
	File    string `json:"file,omitempty"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// luaBlock returns the first ```lua fenced block of a Markdown document.
func luaBlock(doc string) (string, error) {
	const open = "```lua\n"
	start := strings.Index(doc, open)
	if start < 0 {
		return "", errors.New("no ```lua block")
	}
	body := doc[start+len(open):]
	end := strings.Index(body, "```")
	if end < 0 {
		return "", errors.New("the ```lua block is not closed")
	}
	return body[:end], nil
}

// toLua converts a decoded JSON value the way Argo CD hands an object to Lua: maps become
// hash tables, arrays become sequences from index 1, numbers become Lua numbers, null is nil.
func toLua(l *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case bool:
		return lua.LBool(x)
	case string:
		return lua.LString(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return lua.LString(x)
		}
		return lua.LNumber(f)
	case []any:
		t := l.CreateTable(len(x), 0)
		for _, item := range x {
			t.Append(toLua(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(x))
		for k, item := range x {
			t.RawSetH(lua.LString(k), toLua(l, item))
		}
		return t
	}
	return lua.LNil
}

// field reads a string field of the returned table; absent is "", any other type is an error
// (Argo CD decodes the table into a struct of strings and fails the same way).
func field(t *lua.LTable, name string) (string, error) {
	switch v := t.RawGetString(name).(type) {
	case *lua.LNilType:
		return "", nil
	case lua.LString:
		return string(v), nil
	default:
		return "", fmt.Errorf("hs.%s is a %s, not a string", name, v.Type())
	}
}

func evaluate(script string, object []byte) (health, error) {
	dec := json.NewDecoder(bytes.NewReader(object))
	dec.UseNumber()
	var obj any
	if err := dec.Decode(&obj); err != nil {
		return health{}, fmt.Errorf("object is not JSON: %w", err)
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for name, open := range map[string]lua.LGFunction{
		lua.LoadLibName: lua.OpenPackage,
		lua.BaseLibName: lua.OpenBase,
		lua.TabLibName:  lua.OpenTable,
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), NRet: 0, Protect: true}, lua.LString(name)); err != nil {
			return health{}, fmt.Errorf("opening %s: %w", name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return health{}, fmt.Errorf("script failed: %w", err)
	}
	t, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return health{}, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	status, err := field(t, "status")
	if err != nil {
		return health{}, err
	}
	message, err := field(t, "message")
	if err != nil {
		return health{}, err
	}
	if !validCodes[status] {
		return health{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return health{Status: status, Message: message}, nil
}

func main() {
	docPath := flag.String("doc", "docs/argocd.md", "Markdown file whose first ```lua block is the health check")
	flag.Parse()
	doc, err := os.ReadFile(*docPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-health:", err)
		os.Exit(2)
	}
	script, err := luaBlock(string(doc))
	if err != nil {
		fmt.Fprintf(os.Stderr, "argocd-health: %s: %v\n", *docPath, err)
		os.Exit(2)
	}
	type input struct {
		name string
		data []byte
	}
	var inputs []input
	if flag.NArg() == 0 {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "argocd-health: reading stdin:", err)
			os.Exit(2)
		}
		inputs = append(inputs, input{"", data})
	}
	for _, f := range flag.Args() {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "argocd-health:", err)
			os.Exit(2)
		}
		inputs = append(inputs, input{f, data})
	}
	out := json.NewEncoder(os.Stdout)
	for _, in := range inputs {
		h, err := evaluate(script, in.data)
		if err != nil {
			fmt.Fprintf(os.Stderr, "argocd-health: %s: %v\n", in.name, err)
			os.Exit(1)
		}
		h.File = in.name
		if err := out.Encode(h); err != nil {
			fmt.Fprintln(os.Stderr, "argocd-health:", err)
			os.Exit(2)
		}
	}
}
