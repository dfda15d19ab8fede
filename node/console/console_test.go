package console

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// pages are the console's pages, by path.
var pages = []string{"/", "/providers.html", "/jobs.html", "/job.html", "/services.html", "/service.html", "/provider.html"}

// TestPagesAreServedFromTheBinaryWithoutInlineCode: every page is in the
// embedded files and served with the CSP; no page carries inline script,
// event handler or style, nor loads anything from elsewhere; the script
// each page loads is served as JavaScript; nothing but GET and HEAD is
// answered.
func TestPagesAreServedFromTheBinaryWithoutInlineCode(t *testing.T) {
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	remote := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9]`)
	for _, p := range pages {
		w := get(http.MethodGet, p)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", p, w.Code, w.Header().Get("Content-Type"))
		}
		if csp := w.Header().Get("Content-Security-Policy"); csp != CSP || !strings.HasPrefix(csp, "default-src 'self'") ||
			strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", p, csp)
		}
		doc, err := html.Parse(w.Body)
		if err != nil {
			t.Fatal(err)
		}
		scripts := 0
		var walk func(n *html.Node)
		walk = func(n *html.Node) {
			if n.Type == html.ElementNode {
				for _, a := range n.Attr {
					if strings.HasPrefix(a.Key, "on") || a.Key == "style" || (a.Key == "href" || a.Key == "src") && remote.MatchString(a.Val) {
						t.Errorf("%s: <%s %s=%q>", p, n.Data, a.Key, a.Val)
					}
				}
				switch n.Data {
				case "script":
					scripts++
					if src := attrOf(n, "src"); src != "console.js" || n.FirstChild != nil {
						t.Errorf("%s: a script that is not console.js (src %q)", p, src)
					}
				case "style":
					t.Errorf("%s: an inline style sheet", p)
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
		if scripts != 1 {
			t.Errorf("%s: %d scripts", p, scripts)
		}
	}
	for file, ctype := range map[string]string{"/console.js": "text/javascript", "/console.css": "text/css"} {
		w := get(http.MethodGet, file)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) || w.Body.Len() == 0 {
			t.Errorf("%s: %d %q, %d bytes", file, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if remote.MatchString(w.Body.String()) && !strings.Contains(w.Body.String(), "http://www.w3.org/2000/svg") {
			t.Errorf("%s refers to another origin", file)
		}
	}
	// Every embedded file is one of the above: nothing unaccounted for.
	_ = fs.WalkDir(files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		p := "/" + path
		if p == "/index.html" {
			p = "/"
		}
		if !strings.HasSuffix(p, ".js") && !strings.HasSuffix(p, ".css") && !contains(pages, p) {
			t.Errorf("embedded %s is not a page", path)
		}
		return nil
	})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if w := get(m, "/"); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s /: %d", m, w.Code)
		}
	}
	w := get(http.MethodGet, "/no-such-page.html")
	b, _ := io.ReadAll(w.Body)
	if w.Code != http.StatusNotFound {
		t.Errorf("unknown page: %d %q", w.Code, b)
	}
}

func attrOf(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
