package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A minimal W3C WebDriver client for chromedriver: the protocol is JSON over HTTP, and the
// tests need a handful of its commands (new session, navigate, find, click, send keys,
// execute script, screenshot). No library: nothing to pin or audit for so little.

// browserPaths finds Debian's chromium and chromium-driver. Without them the browser tests
// skip, except in CI (CI set), where .ci/run installs them and their absence fails.
func browserPaths(t *testing.T) (chromium, driver string) {
	t.Helper()
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
		}
		return ""
	}
	chromium = find("chromium", "chromium-browser", "/usr/lib/chromium/chromium")
	driver = find("chromedriver", "/usr/lib/chromium/chromedriver")
	if chromium == "" || driver == "" {
		msg := fmt.Sprintf("chromium (%q) and chromedriver (%q) are needed: apt-get install chromium chromium-driver", chromium, driver)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return chromium, driver
}

// webDriver is one chromedriver process and one headless browser session.
type webDriver struct {
	t      *testing.T
	base   string // http://127.0.0.1:port/session/id
	client *http.Client
}

// startBrowser runs chromedriver on a free loopback port and opens a headless session; both
// end with the test.
func startBrowser(t *testing.T) *webDriver {
	t.Helper()
	chromium, driver := browserPaths(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	wd := &webDriver{t: t, client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st struct {
			Ready bool `json:"ready"`
		}
		if err := wd.call("GET", root+"/status", nil, &st); err == nil && st.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver not ready: %s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling a process that announces nothing
	}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": []string{
			"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900",
			"--no-first-run", "--disable-extensions", "--user-data-dir=" + t.TempDir()}},
	}}}
	if err := wd.call("POST", root+"/session", caps, &sess); err != nil {
		t.Fatalf("new session: %v\n%s", err, logs.String())
	}
	wd.base = root + "/session/" + sess.SessionID
	t.Cleanup(func() { _ = wd.call("DELETE", wd.base, nil, nil) })
	return wd
}

// call sends one WebDriver command and decodes its "value" into out.
func (wd *webDriver) call(method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := wd.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, env.Value)
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

func (wd *webDriver) do(method, path string, in, out any) {
	wd.t.Helper()
	if err := wd.call(method, wd.base+path, in, out); err != nil {
		wd.t.Fatal(err)
	}
}

func (wd *webDriver) navigate(url string) {
	wd.t.Helper()
	wd.do("POST", "/url", map[string]string{"url": url}, nil)
}

// js runs script in the page (its arguments as arguments[0…]) and decodes its result.
func (wd *webDriver) js(out any, script string, args ...any) {
	wd.t.Helper()
	if args == nil {
		args = []any{}
	}
	wd.do("POST", "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

const elementKey = "element-6066-11e4-a52e-4f735466cecf"

// find returns the element the CSS selector finds.
func (wd *webDriver) find(css string) string {
	wd.t.Helper()
	var el map[string]string
	wd.do("POST", "/element", map[string]string{"using": "css selector", "value": css}, &el)
	if el[elementKey] == "" {
		wd.t.Fatalf("find %s: %v", css, el)
	}
	return el[elementKey]
}

// click clicks what css finds, as a user would (WebDriver's element click).
func (wd *webDriver) click(css string) {
	wd.t.Helper()
	wd.do("POST", "/element/"+wd.find(css)+"/click", map[string]any{}, nil)
}

// typeInto types text into the field css finds.
func (wd *webDriver) typeInto(css, text string) {
	wd.t.Helper()
	wd.do("POST", "/element/"+wd.find(css)+"/value", map[string]string{"text": text}, nil)
}

// text returns the textContent of what css finds ("" when nothing).
func (wd *webDriver) text(css string) string {
	wd.t.Helper()
	var s string
	wd.js(&s, `const e = document.querySelector(arguments[0]); return e ? e.textContent : "";`, css)
	return s
}

// waitText waits until the textContent of what css finds satisfies ok, within d, and
// returns how long it took. The page's DOM announces nothing to the test: it is polled.
func (wd *webDriver) waitText(what, css string, d time.Duration, ok func(string) bool) time.Duration {
	wd.t.Helper()
	start := time.Now()
	var last string
	for {
		if last = wd.text(css); ok(last) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			wd.screenshot("timeout")
			wd.t.Fatalf("timed out after %v waiting for %s (%s: %q)", d, what, css, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(sub string) func(string) bool {
	return func(s string) bool { return strings.Contains(s, sub) }
}

// screenshot saves a PNG of the page under $FACEAGENT_SCREENSHOT_DIR (or the test's
// temporary directory) for a person to look at, and logs its path.
func (wd *webDriver) screenshot(name string) string {
	wd.t.Helper()
	var b64 string
	if err := wd.call("GET", wd.base+"/screenshot", nil, &b64); err != nil {
		wd.t.Logf("screenshot: %v", err)
		return ""
	}
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		wd.t.Fatal(err)
	}
	dir := os.Getenv("FACEAGENT_SCREENSHOT_DIR")
	if dir == "" {
		dir = wd.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		wd.t.Fatal(err)
	}
	path := dir + "/" + wd.t.Name() + "-" + name + ".png"
	path = strings.ReplaceAll(path, " ", "_")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		wd.t.Fatal(err)
	}
	wd.t.Logf("screenshot of the page: %s (%d bytes)", path, len(png))
	return path
}
