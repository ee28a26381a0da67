package compact

import (
	"reflect"
	"testing"

	"github.com/compactd/compactd/internal/fixtures"
	"github.com/tidwall/gjson"

	"github.com/compactd/compactd/internal/jsonx"
)

// refWalkStrings is the recursive gjson walk walkStrings replaced, kept as the oracle for what
// it must visit: fine on shallow values, quadratic and stack-hungry on deep ones.
func refWalkStrings(v gjson.Result, key string, schemaKeys bool, visit func(string), special func(int)) {
	switch {
	case v.Type == gjson.String:
		switch {
		case key == "image_url" && isDataURL(v.Raw):
			special(imageTokens)
		case key == "file_data":
			special(len(v.Raw)/fileDataBytesPerToken + 1)
		default:
			visit(v.Str)
		}
	case v.IsObject():
		props := schemaKeys && key == "properties"
		v.ForEach(func(k, val gjson.Result) bool {
			if skipKeys[k.Str] {
				return true
			}
			if props {
				visit(k.Str)
			}
			refWalkStrings(val, k.Str, schemaKeys, visit, special)
			return true
		})
	case v.IsArray():
		v.ForEach(func(_, val gjson.Result) bool {
			refWalkStrings(val, "", schemaKeys, visit, special)
			return true
		})
	}
}

// collect returns what the reference walk, walkStrings and walkRawStrings visit: decoded strings
// plus the special token charges.
func collect(js string, schemaKeys bool) (ref, dec, raw []string, specRef, specDec, specRaw int) {
	refWalkStrings(gjson.Parse(js), "", schemaKeys, func(s string) { ref = append(ref, s) }, func(n int) { specRef += n })
	walkStrings(js, schemaKeys, func(s string) { dec = append(dec, s) }, func(n int) { specDec += n })
	walkRawStrings(js, schemaKeys, func(lit string) {
		raw = append(raw, gjson.Parse(lit).Str)
	}, func(n int) { specRaw += n })
	return
}

func walkerSeeds(t testing.TB) []string {
	seeds := []string{
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"a \"quoted\" \\ \n line \u00e9"}]}`,
		`{"type":"reasoning","id":"rs","summary":[{"type":"summary_text","text":"x"}],"encrypted_content":"gAAA"}`,
		`{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAAA"},{"type":"input_file","file_data":"QUJD","filename":"a.pdf"}]}`,
		`[{"type":"function","name":"f","parameters":{"type":"object","properties":{"cmd":{"type":"string"},"n":{"type":"integer"}}}}]`,
		`{"a":[1,2.5e3,true,false,null,{"b":"c"}],"id":{"nested":"skipped"},"status":"x","k":[]}`,
		` { "spaced" : [ "a" , { "b" : "c" } ] } `,
	}
	_, captures := fixtures.CodexAll()
	for _, b := range captures {
		for _, it := range gjson.GetBytes(b, "body.input").Array() {
			seeds = append(seeds, it.Raw)
		}
	}
	return seeds
}

func TestRawWalkerMatchesGJSON(t *testing.T) {
	for _, js := range walkerSeeds(t) {
		for _, sk := range []bool{false, true} {
			g, d, r, sg, sd, sr := collect(js, sk)
			if !reflect.DeepEqual(g, r) || !reflect.DeepEqual(g, d) || sg != sr || sg != sd {
				t.Errorf("walkers disagree on %.80s (schemaKeys=%v):\ngjson %q %d\ndecoded %q %d\nraw   %q %d", js, sk, g, sg, d, sd, r, sr)
			}
		}
	}
}

func FuzzRawWalker(f *testing.F) {
	for _, s := range walkerSeeds(f) {
		f.Add(s)
	}
	f.Add(`{"a":"unterminated`)
	f.Add(`[[[[[[`)
	f.Fuzz(func(t *testing.T, js string) {
		walkRawStrings(js, true, func(string) {}, func(int) {}) // must not panic or hang
		if jsonx.ValidString(js) != nil {
			return
		}
		g, d, r, sg, sd, sr := collect(js, true)
		if !reflect.DeepEqual(g, r) || !reflect.DeepEqual(g, d) || sg != sr || sg != sd {
			t.Errorf("walkers disagree on %q:\n%q\n%q\n%q", js, g, d, r)
		}
	})
}
