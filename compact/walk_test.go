package compact

import (
	"reflect"
	"testing"

	"github.com/compactd/compactd/internal/fixtures"
	"github.com/tidwall/gjson"
)

// collect returns what each walker visits: decoded strings plus the special token charges.
func collect(js string, schemaKeys bool) (viaGJSON, viaRaw []string, specG, specR int) {
	walkStrings(js, schemaKeys, func(_ string, v gjson.Result) { viaGJSON = append(viaGJSON, v.Str) }, func(n int) { specG += n })
	walkRawStrings(js, schemaKeys, func(lit string) {
		viaRaw = append(viaRaw, gjson.Parse(lit).Str)
	}, func(n int) { specR += n })
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
			g, r, sg, sr := collect(js, sk)
			if !reflect.DeepEqual(g, r) || sg != sr {
				t.Errorf("walkers disagree on %.80s (schemaKeys=%v):\ngjson %q %d\nraw   %q %d", js, sk, g, sg, r, sr)
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
		if !gjson.Valid(js) {
			return
		}
		g, r, sg, sr := collect(js, true)
		if !reflect.DeepEqual(g, r) || sg != sr {
			t.Errorf("walkers disagree on %q:\n%q\n%q", js, g, r)
		}
	})
}
