package designkit

import (
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/payonce/payonce/pgtest"
)

// pythonBin is Debian's interpreter, whose dist-packages hold the kits'
// libraries (.ci/deps/python.sh): a python3 earlier on PATH (pyenv, a
// virtualenv) may lack them.
func pythonBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	need(t, "python.sh", "python3")
	return ""
}

// pythonNeeds fails the test unless py imports every module, naming the
// script that installs them.
func pythonNeeds(t *testing.T, py string, modules ...string) {
	t.Helper()
	cmd := exec.Command(py, "-c", "import "+strings.Join(modules, ", "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("designkit: %s cannot import %s: run .ci/deps/python.sh (as root) to install them\n%s", py, strings.Join(modules, ", "), out)
	}
}

var mariaDBs atomic.Int64

// TestPythonDjangoKit runs the Django kit's pytest suite on a throwaway
// MariaDB: the middleware, the consumer and the cleanup job of the
// django-mysql-rabbitmq document, as generated.
func TestPythonDjangoKit(t *testing.T) {
	py := pythonBin(t)
	pythonNeeds(t, py, "django", "pymysql", "pytest")
	addr := mariaDB(t)
	kit := generate(t, "django-mysql-rabbitmq")
	// A database of this run's own: the conftest creates it.
	db := fmt.Sprintf("kit_django_%d", mariaDBs.Add(1))
	out := run(t, kit, []string{"IDEMPOTENCY_MYSQL_URL=mysql://root@" + addr + "/" + db, "PYTHONDONTWRITEBYTECODE=1"},
		py, "-m", "pytest", "-q", "-p", "no:cacheprovider")
	t.Logf("pytest: %s", pyLastLine(out))
}

// TestPythonFastAPIKit runs the FastAPI kit's pytest suite on PostgreSQL
// (a fresh schema of pgtest's): the dependency with its Stripe call
// against a fake provider, and the cleanup job.
func TestPythonFastAPIKit(t *testing.T) {
	py := pythonBin(t)
	pythonNeeds(t, py, "fastapi", "psycopg", "httpx", "pytest")
	u := pyLibpqURL(t, pgtest.SchemaURL(t))
	kit := generate(t, "fastapi-postgres-stripe")
	out := run(t, kit, []string{"IDEMPOTENCY_DATABASE_URL=" + u, "PYTHONDONTWRITEBYTECODE=1"},
		py, "-m", "pytest", "-q", "-p", "no:cacheprovider")
	t.Logf("pytest: %s", pyLastLine(out))
}

// pyLibpqURL turns pgtest's search_path query parameter (pgx's runtime
// parameter) into libpq's options=-c search_path=..., which psycopg reads.
func pyLibpqURL(t *testing.T, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("designkit: database URL: %v", err)
	}
	q := u.Query()
	if sp := q.Get("search_path"); sp != "" {
		q.Del("search_path")
		q.Set("options", "-c search_path="+sp)
	}
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq reads no + as a space
	return u.String()
}

func pyLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
