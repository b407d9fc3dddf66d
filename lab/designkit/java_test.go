package designkit

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/payonce/payonce/pgtest"
)

// javaLibs are the Debian jars the Java kit compiles and runs against
// (.ci/deps/java.sh installs them).
const javaLibs = "/usr/share/java"

// TestJavaServletKit compiles the Java kit of the Spring answers file with
// javac and runs its JUnit 5 scenarios against a real PostgreSQL schema.
func TestJavaServletKit(t *testing.T) {
	need(t, "java.sh", "javac", "java")
	for _, jar := range []string{"jakarta-servlet-api.jar", "postgresql.jar", "junit-platform-console-standalone.jar"} {
		if _, err := os.Stat(filepath.Join(javaLibs, jar)); err != nil {
			t.Fatalf("designkit: %s not found in %s: run .ci/deps/java.sh (as root) to install the toolchain", jar, javaLibs)
		}
	}
	jdbc, err := jdbcURL(pgtest.SchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	kit := generate(t, "spring-postgres-kafka-adyen")
	out := run(t, kit, []string{"IDEMPOTENCY_TEST_JDBC_URL=" + jdbc, "JAVA_LIBS=" + javaLibs}, "sh", "run-tests.sh")
	if !strings.Contains(out, "0 tests failed") || strings.Contains(out, " 0 tests successful") {
		t.Fatalf("the Java kit's tests did not all pass:\n%s", out)
	}
	t.Logf("java kit: %s", lastLines(out, 3))
}

// jdbcURL turns a postgres:// URL whose search_path selects a schema into
// the PostgreSQL JDBC driver's form: the schema goes into currentSchema,
// user and password into parameters.
func jdbcURL(pg string) (string, error) {
	u, err := url.Parse(pg)
	if err != nil {
		return "", err
	}
	q := url.Values{}
	for k, v := range u.Query() {
		switch k {
		case "search_path":
			q.Set("currentSchema", v[0])
		case "sslmode":
			q.Set("sslmode", v[0])
		}
	}
	if u.User != nil {
		q.Set("user", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	return "jdbc:postgresql://" + u.Host + u.Path + "?" + q.Encode(), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}
