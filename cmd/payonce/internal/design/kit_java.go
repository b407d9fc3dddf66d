package design

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
)

// The Java kit: a jakarta.servlet Filter (Spring Boot 3 registers it with
// a FilterRegistrationBean) and a Kafka consumer guard over PostgreSQL
// through JDBC, the statements of D2, JUnit 5 tests against a real
// PostgreSQL.
func init() {
	registerKit([]string{"java-servlet"}, javaKit)
}

// javaFrameworks are the frameworks whose HTTP layer runs servlet
// filters ("" is a plain servlet container).
var javaFrameworks = []string{"spring", "servlet", "jakarta", "java ee", "jee", "tomcat", "jetty", "undertow", "dropwizard"}

func javaKit(d *Document) *Kit {
	st := d.Answers.Stack
	if strings.ToLower(strings.TrimSpace(st.Language)) != "java" || d.Store != StorePostgres {
		return nil
	}
	fw := strings.ToLower(strings.TrimSpace(st.Framework))
	if fw != "" && !slices.ContainsFunc(javaFrameworks, func(f string) bool { return strings.Contains(fw, f) }) {
		return nil
	}
	data := javaData(d)
	gen := func(t *template.Template) string {
		var s strings.Builder
		if err := t.Execute(&s, data); err != nil {
			panic(err) // the templates are the kit's own
		}
		return s.String()
	}
	const dir = "src/main/java/idempotency/"
	k := &Kit{
		Stack: "java-servlet",
		Intro: "Java 17+, a jakarta.servlet Filter (Servlet 5+, so Spring Boot 3, Tomcat 10, Jetty 11): in Spring, register it with a FilterRegistrationBean on the protected routes (IdempotencyFilter's comment shows it), after the authentication filter, so that the scope comes from the authenticated principal. " +
			"Storage is PostgreSQL through plain JDBC (the PostgreSQL JDBC driver 42.x, any DataSource such as Spring's HikariCP) with the table and statements of D2; every lease and expiry is decided by now(), the server's clock. " +
			"Kafka records have no message id: IdempotentConsumer keys a record by a business id the producer sets (the same on a re-publish) or by topic/partition/offset, and commits the handler's writes in the transaction of the fenced COMPLETED update. No other dependency: the request body is parsed by a function you pass (with Spring, Jackson's ObjectMapper).",
		Middleware: []File{
			{Path: dir + "Actions.java", Lang: "java", Text: gen(javaActions)},
			{Path: dir + "IdempotencyStore.java", Lang: "java", Text: gen(javaStore)},
			{Path: dir + "IdempotencyFilter.java", Lang: "java", Text: gen(javaFilter)},
			{Path: dir + "IdempotentConsumer.java", Lang: "java", Text: gen(javaConsumer)},
		},
		Fingerprint: []File{{Path: dir + "Fingerprint.java", Lang: "java", Text: gen(javaFingerprint)}},
		Cleanup:     []File{{Path: dir + "IdempotencyCleanup.java", Lang: "java", Text: gen(javaCleanup)}},
		Tests: []File{
			{Path: "src/test/java/idempotency/IdempotencyKitTest.java", Lang: "java", Text: gen(javaTests)},
			{Path: "src/test/java/idempotency/Http.java", Lang: "java", Text: gen(javaHTTP)},
		},
		Support: []File{
			{Path: "schema.sql", Lang: "sql", Text: referenceDDL() + "\n"},
			{Path: "run-tests.sh", Lang: "sh", Text: javaRun},
		},
		Run: "IDEMPOTENCY_TEST_JDBC_URL='jdbc:postgresql://localhost/app_test?user=app' sh run-tests.sh (javac and the JUnit 5 console launcher; with Maven or Gradle, the same sources under src/main and src/test, with jakarta.servlet-api 5+, org.postgresql:postgresql 42.x and junit-jupiter 5.9+)",
	}
	if data.Adyen {
		k.Middleware = append(k.Middleware, File{Path: dir + "AdyenIdempotency.java", Lang: "java", Text: gen(javaAdyen)})
	}
	return k
}

// javaAction is one action as the Java code declares it.
type javaAction struct {
	Name, Route, Trigger, Lock, Heartbeat string
	LockSeconds, HeartbeatMillis          int64
	Fields                                []string
}

type javaKitData struct {
	RetentionSeconds int64
	Retention        string
	HTTP, Consumers  []javaAction
	// Test is the HTTP action the tests exercise; Consumer the consumer
	// action (or a stand-in named "example" when the document has none).
	Test, Consumer javaAction
	Adyen          bool
	AdyenStep      string
}

func javaData(d *Document) javaKitData {
	data := javaKitData{RetentionSeconds: int64(d.Retention.Seconds()), Retention: human(d.Retention)}
	for _, x := range d.Actions {
		fields := slices.Clone(x.Fields)
		slices.Sort(fields)
		a := javaAction{Name: x.Name, Trigger: x.Trigger, Lock: human(x.LockTimeout), LockSeconds: int64(x.LockTimeout.Seconds()),
			Heartbeat: human(x.Heartbeat), HeartbeatMillis: x.Heartbeat.Milliseconds(), Fields: fields}
		if x.Kind == "http" {
			a.Route = javaRoute(x)
			data.HTTP = append(data.HTTP, a)
			for _, r := range x.Refs {
				if r.Provider == "Adyen" && !data.Adyen {
					data.Adyen, data.AdyenStep, data.Test = true, r.Step, a
				}
			}
		} else {
			data.Consumers = append(data.Consumers, a)
		}
	}
	if data.Test.Name == "" {
		if len(data.HTTP) > 0 {
			data.Test = data.HTTP[0]
		} else {
			data.Test = javaAction{Name: "example", Route: "POST /example", Lock: "30s", LockSeconds: 30, Fields: []string{"amount"}}
		}
	}
	if len(data.Consumers) > 0 {
		data.Consumer = data.Consumers[0]
	} else {
		data.Consumer = javaAction{Name: "example", Lock: "30s", LockSeconds: 30}
	}
	return data
}

// javaRoute is an HTTP action's "METHOD /path", from its trigger ("POST
// /payments"), or POST /<name> when the trigger names none.
func javaRoute(x ActionPlan) string {
	f := strings.Fields(x.Trigger)
	if len(f) == 2 && strings.HasPrefix(f[1], "/") && strings.ToUpper(f[0]) == f[0] {
		return f[0] + " " + f[1]
	}
	return "POST /" + x.Name
}

// javaString quotes s as a Java string literal.
func javaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r > 0x7e:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// javaComment keeps s from closing a comment.
func javaComment(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "*/", "* /"), "\n", " ")
}

func javaTemplate(name, text string) *template.Template {
	return template.Must(template.New(name).Funcs(template.FuncMap{
		"q": javaString, "c": javaComment,
		"strs": func(ss []string) string {
			var q []string
			for _, s := range ss {
				q = append(q, javaString(s))
			}
			return strings.Join(q, ", ")
		},
	}).Parse(text))
}

var javaActions = javaTemplate("Actions.java", `package idempotency;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/** The protected actions of the design document: their significant fields (section 3), lock timeouts and heartbeats (section 4) and the retention (section 2(e)). */
public final class Actions {
    private Actions() {}

    /**
     * One protected action. fields are sorted by name: the fingerprint covers them in this order.
     * While it runs, its lease of lockTimeout is renewed every heartbeat (zero: never), so a live
     * holder keeps it and a crashed one frees it within lockTimeout.
     */
    public record Action(String name, List<String> fields, Duration lockTimeout, Duration heartbeat) {
        public Action {
            if (lockTimeout.isNegative() || lockTimeout.isZero()) {
                throw new IllegalArgumentException("action " + name + ": the lock timeout must be positive, got " + lockTimeout);
            }
            if (heartbeat.isNegative() || heartbeat.compareTo(lockTimeout) >= 0) {
                throw new IllegalArgumentException("action " + name + ": the heartbeat (" + heartbeat + ") must be shorter than the lock timeout ("
                        + lockTimeout + "), a third of it is the design's, or zero to turn heartbeats off");
            }
        }

        /** An action whose lease is renewed every third of it. */
        public Action(String name, List<String> fields, Duration lockTimeout) {
            this(name, fields, lockTimeout, lockTimeout.dividedBy(3));
        }

        /** The same action with another lease, renewed every third of it. */
        public Action withLockTimeout(Duration lease) {
            return new Action(name, fields, lease);
        }

        /** The same action renewing its lease every period; Duration.ZERO turns heartbeats off. */
        public Action withHeartbeat(Duration period) {
            return new Action(name, fields, lockTimeout, period);
        }
    }

    /** A key is kept {{.Retention}}; past its expires_at it is a new key. */
    public static final Duration RETENTION = Duration.ofSeconds({{.RetentionSeconds}}L);

    /** HTTP actions by "METHOD /path". */
    public static final Map<String, Action> HTTP = Map.ofEntries({{range $i, $a := .HTTP}}{{if $i}},{{end}}
            Map.entry({{q $a.Route}}, new Action({{q $a.Name}}, List.of({{strs $a.Fields}}), Duration.ofSeconds({{$a.LockSeconds}}), Duration.ofMillis({{$a.HeartbeatMillis}}))){{end}});

    /** Consumer actions by name. */
    public static final Map<String, Action> CONSUMERS = Map.ofEntries({{range $i, $a := .Consumers}}{{if $i}},{{end}}
            // {{c $a.Trigger}}
            Map.entry({{q $a.Name}}, new Action({{q $a.Name}}, List.of({{strs $a.Fields}}), Duration.ofSeconds({{$a.LockSeconds}}), Duration.ofMillis({{$a.HeartbeatMillis}}))){{end}});
}
`)

var javaStore = javaTemplate("IdempotencyStore.java", `package idempotency;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * The record of D2 on PostgreSQL: claim (create if absent, else decide on
 * the row read), take over an ended lease by compare-and-set on
 * lock_version, keep a live holder's lease with a heartbeat, and complete
 * fenced by the holder's lock_version. Every instant is now(), the
 * database's clock.
 */
public final class IdempotencyStore {
    private static final Logger LOG = Logger.getLogger(IdempotencyStore.class.getName());
    public sealed interface Claim permits Acquired, Replay, Busy, Mismatch {}
    /** This caller holds the lease under lockVersion: run the action. */
    public record Acquired(long lockVersion) implements Claim {}
    /** The action finished: answer its stored response. */
    public record Replay(int status, String contentType, byte[] body) implements Claim {}
    /** Another holder's lease is live: answer 409 with Retry-After. */
    public record Busy(long retryAfterSeconds) implements Claim {}
    /** The key was used with other significant fields: refuse. */
    public record Mismatch() implements Claim {}

    static final String INSERT = """
            INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status,
                                           lock_version, locked_until, expires_at)
            VALUES (?, ?, ?, 'PROCESSING', 1, now() + ? * interval '1 millisecond', now() + ? * interval '1 millisecond')
            ON CONFLICT (idempotency_key, user_id) DO NOTHING
            RETURNING lock_version""";
    static final String READ = """
            SELECT fingerprint, status, response_code, response_raw, response_body->>'content_type' AS content_type,
                   lock_version, locked_until > now() AS live, expires_at <= now() AS expired,
                   greatest(1, ceil(extract(epoch FROM locked_until - now())))::bigint AS retry_after
              FROM idempotency_store WHERE idempotency_key = ? AND user_id = ?""";
    static final String TAKE_OVER = """
            UPDATE idempotency_store
               SET lock_version = lock_version + 1, locked_until = now() + ? * interval '1 millisecond'
             WHERE idempotency_key = ? AND user_id = ? AND status NOT IN ('COMPLETED', 'FAILED')
               AND locked_until <= now() AND lock_version = ?
            RETURNING lock_version""";
    // past expires_at the key is new: the row starts over, its lock_version
    // still grows, so an old holder's fencing token never comes back
    static final String RENEW = """
            UPDATE idempotency_store
               SET fingerprint = ?, status = 'PROCESSING', response_code = NULL, response_body = NULL,
                   response_raw = NULL, completed_at = NULL, created_at = now(), lock_version = lock_version + 1,
                   locked_until = now() + ? * interval '1 millisecond', expires_at = now() + ? * interval '1 millisecond'
             WHERE idempotency_key = ? AND user_id = ? AND lock_version = ? AND expires_at <= now()
               AND (status <> 'PROCESSING' OR locked_until <= now())
            RETURNING lock_version""";
    static final String COMPLETE = """
            UPDATE idempotency_store
               SET status = 'COMPLETED', response_code = ?, response_body = jsonb_build_object('content_type', ?::text),
                   response_raw = ?, completed_at = now(), locked_until = NULL
             WHERE idempotency_key = ? AND user_id = ? AND lock_version = ? AND status NOT IN ('COMPLETED', 'FAILED')""";
    // the heartbeat: extend the holder's lease, fenced by its lock_version
    static final String HEARTBEAT = """
            UPDATE idempotency_store SET locked_until = now() + ? * interval '1 millisecond'
             WHERE idempotency_key = ? AND user_id = ? AND lock_version = ? AND status NOT IN ('COMPLETED', 'FAILED')""";
    // the action failed without an outcome to keep: end the lease now, so
    // that a retry takes over at once
    static final String RELEASE = """
            UPDATE idempotency_store SET locked_until = now()
             WHERE idempotency_key = ? AND user_id = ? AND lock_version = ? AND status NOT IN ('COMPLETED', 'FAILED')""";

    private final DataSource db;
    private final Duration retention;

    public IdempotencyStore(DataSource db, Duration retention) {
        this.db = db;
        this.retention = retention;
    }

    /** Claims (scope, key) for one run of the action, or says what to answer instead. */
    public Claim claim(String key, String scope, String fingerprint, Duration lease) throws SQLException {
        try (Connection c = db.getConnection()) {
            c.setAutoCommit(true);
            for (int round = 0; round < 3; round++) {
                Long v = version(c, INSERT, key, scope, fingerprint, lease.toMillis(), retention.toMillis());
                if (v != null) {
                    return new Acquired(v);
                }
                try (PreparedStatement s = c.prepareStatement(READ)) {
                    s.setString(1, key);
                    s.setString(2, scope);
                    try (ResultSet r = s.executeQuery()) {
                        if (!r.next()) {
                            continue; // deleted by the cleanup in between: claim again
                        }
                        String status = r.getString("status");
                        long seen = r.getLong("lock_version");
                        boolean live = r.getBoolean("live");
                        if (r.getBoolean("expired") && !("PROCESSING".equals(status) && live)) {
                            v = version(c, RENEW, fingerprint, lease.toMillis(), retention.toMillis(), key, scope, seen);
                        } else if (!Fingerprint.matches(r.getString("fingerprint"), fingerprint)) {
                            return new Mismatch();
                        } else if (!"PROCESSING".equals(status)) {
                            return new Replay(r.getInt("response_code"), r.getString("content_type"), r.getBytes("response_raw"));
                        } else if (live) {
                            return new Busy(r.getLong("retry_after"));
                        } else {
                            v = version(c, TAKE_OVER, lease.toMillis(), key, scope, seen);
                        }
                    }
                }
                if (v != null) {
                    return new Acquired(v);
                }
                // another contender changed the row first: decide again
            }
            return new Busy(1);
        }
    }

    /** Stores the outcome if lockVersion still holds the lease (fencing); false when it does not. */
    public boolean complete(String key, String scope, long lockVersion, int status, String contentType, byte[] body) throws SQLException {
        try (Connection c = db.getConnection()) {
            c.setAutoCommit(true);
            return complete(c, key, scope, lockVersion, status, contentType, body);
        }
    }

    /** The same, on the caller's connection: in its transaction, the action's writes commit with the outcome or not at all. */
    public boolean complete(Connection c, String key, String scope, long lockVersion, int status, String contentType, byte[] body) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(COMPLETE)) {
            s.setInt(1, status);
            s.setString(2, contentType);
            s.setBytes(3, body);
            s.setString(4, key);
            s.setString(5, scope);
            s.setLong(6, lockVersion);
            return s.executeUpdate() == 1;
        }
    }

    /** The heartbeat: extends the holder's lease to now() + lease if lockVersion still holds it; false when it does not. */
    public boolean renew(String key, String scope, long lockVersion, Duration lease) throws SQLException {
        try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement(HEARTBEAT)) {
            c.setAutoCommit(true);
            s.setQueryTimeout((int) Math.max(1, lease.toSeconds()));
            s.setLong(1, lease.toMillis());
            s.setString(2, key);
            s.setString(3, scope);
            s.setLong(4, lockVersion);
            return s.executeUpdate() == 1;
        }
    }

    /**
     * Keeps lockVersion's lease of action while the action runs: on beats, every
     * action.heartbeat(), a renewal on a connection of its own from the DataSource. Close
     * the lease before completing: no renewal runs after close returns.
     */
    public Lease hold(ScheduledExecutorService beats, String key, String scope, long lockVersion, Actions.Action action) {
        Lease lease = new Lease(key);
        long every = action.heartbeat().toMillis();
        if (every > 0) {
            lease.started(beats.scheduleWithFixedDelay(() -> lease.beat(() -> renew(key, scope, lockVersion, action.lockTimeout())),
                    every, every, TimeUnit.MILLISECONDS));
        }
        return lease;
    }

    /** A held lease and its heartbeat. */
    public static final class Lease implements AutoCloseable {
        interface Renewal {
            boolean renew() throws SQLException;
        }

        private final String key;
        private final CompletableFuture<Void> lost = new CompletableFuture<>();
        private ScheduledFuture<?> beat;
        private boolean closed;

        private Lease(String key) {
            this.key = key;
        }

        /** False once a renewal found the lease taken over: check it before an effect the record cannot roll back. */
        public boolean held() {
            return !lost.isDone();
        }

        /** Completes when a renewal finds the lease taken over: the holder's completion will be refused. */
        public CompletableFuture<Void> lost() {
            return lost.copy();
        }

        private synchronized void started(ScheduledFuture<?> f) {
            beat = f;
            if (closed) {
                f.cancel(false);
            }
        }

        private synchronized void beat(Renewal r) {
            if (closed || lost.isDone()) {
                return;
            }
            try {
                if (!r.renew()) {
                    lost.complete(null);
                    if (beat != null) {
                        beat.cancel(false);
                    }
                    LOG.warning("idempotency: key " + Fingerprint.shortHash(key) + ": lease lost to another holder; heartbeat stopped");
                }
            } catch (SQLException | RuntimeException e) { // the database is away: try again at the next beat
                LOG.warning("idempotency: key " + Fingerprint.shortHash(key) + ": heartbeat failed: " + e.getClass().getSimpleName());
            }
        }

        /** Stops the heartbeat, waiting for a renewal in flight. */
        @Override
        public synchronized void close() {
            closed = true;
            if (beat != null) {
                beat.cancel(false);
            }
        }
    }

    /** Ends the holder's lease now, keeping nothing: a retry runs the action again. */
    public void release(String key, String scope, long lockVersion) throws SQLException {
        try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement(RELEASE)) {
            s.setString(1, key);
            s.setString(2, scope);
            s.setLong(3, lockVersion);
            s.executeUpdate();
        }
    }

    private static Long version(Connection c, String sql, Object... args) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                s.setObject(i + 1, args[i]);
            }
            try (ResultSet r = s.executeQuery()) {
                return r.next() ? r.getLong(1) : null;
            }
        }
    }
}
`)

var javaFilter = javaTemplate("IdempotencyFilter.java", `package idempotency;

import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.function.Function;
import java.util.logging.Logger;
import java.util.regex.Pattern;

/**
 * Claim, run, record, replay for the HTTP actions of Actions.HTTP. While the
 * handler runs, a heartbeat renews the lease every action.heartbeat() (the
 * request attribute LEASE_ATTRIBUTE holds it: check held() before an effect
 * the record cannot roll back); a request whose lease was taken over
 * meanwhile gets a 409 and records nothing. In Spring Boot 3:
 *
 * <pre>
 * &#64;Bean
 * FilterRegistrationBean&lt;IdempotencyFilter&gt; idempotency(DataSource db, ObjectMapper json) {
 *     var filter = new IdempotencyFilter(new IdempotencyStore(db, Actions.RETENTION), Actions.HTTP,
 *             req -&gt; req.getUserPrincipal() == null ? null : req.getUserPrincipal().getName(),
 *             (body, type) -&gt; json.readValue(body, Map.class));
 *     var bean = new FilterRegistrationBean&lt;&gt;(filter);{{range .HTTP}}
 *     bean.addUrlPatterns({{q .Route}}.substring({{q .Route}}.indexOf(' ') + 1));{{end}}
 *     bean.setOrder(SecurityProperties.DEFAULT_FILTER_ORDER + 1); // after authentication
 *     return bean;
 * }
 * </pre>
 */
public final class IdempotencyFilter implements Filter {
    /** The request attribute holding the composed key {scope}_{action}_{intent}, for provider references. */
    public static final String KEY_ATTRIBUTE = "idempotency.key";
    /** The request attribute holding the request's IdempotencyStore.Lease. */
    public static final String LEASE_ATTRIBUTE = "idempotency.lease";
    /** Parses a request body into its fields (with Spring: Jackson's ObjectMapper). */
    public interface BodyParser {
        Map<String, ?> parse(byte[] body, String contentType) throws IOException;
    }
    /** Parses application/x-www-form-urlencoded bodies. */
    public static final BodyParser FORM = (body, type) -> {
        Map<String, String> m = new HashMap<>();
        for (String pair : new String(body, StandardCharsets.UTF_8).split("&")) {
            if (!pair.isEmpty()) {
                int eq = pair.indexOf('=');
                String k = eq < 0 ? pair : pair.substring(0, eq), v = eq < 0 ? "" : pair.substring(eq + 1);
                m.put(URLDecoder.decode(k, StandardCharsets.UTF_8), URLDecoder.decode(v, StandardCharsets.UTF_8));
            }
        }
        return m;
    };
    private static final Logger LOG = Logger.getLogger(IdempotencyFilter.class.getName());
    private static final Pattern INTENT = Pattern.compile("[A-Za-z0-9-]{26,128}"); // a UUIDv4 or a ULID: 128 bits
    private static final int MAX_BODY = 1 << 20;

    private final IdempotencyStore store;
    private final Map<String, Actions.Action> routes;
    private final Function<HttpServletRequest, String> scopeOf;
    private final BodyParser parser;
    private final ScheduledExecutorService beats = Executors.newScheduledThreadPool(2, r -> {
        Thread t = new Thread(r, "idempotency-heartbeat");
        t.setDaemon(true);
        return t;
    });

    public IdempotencyFilter(IdempotencyStore store, Map<String, Actions.Action> routes,
                             Function<HttpServletRequest, String> scopeOf, BodyParser parser) {
        this.store = store;
        this.routes = routes;
        this.scopeOf = scopeOf;
        this.parser = parser;
    }

    @Override
    public void doFilter(ServletRequest sreq, ServletResponse sres, FilterChain chain) throws IOException, ServletException {
        HttpServletRequest req = (HttpServletRequest) sreq;
        HttpServletResponse res = (HttpServletResponse) sres;
        Actions.Action action = routes.get(req.getMethod() + " " + req.getRequestURI());
        if (action == null) {
            chain.doFilter(req, res);
            return;
        }
        String scope = scopeOf.apply(req); // from authentication, never from the body
        if (scope == null || scope.isEmpty()) {
            problem(res, 401, "This route needs an authenticated caller.");
            return;
        }
        String presented = req.getHeader("Idempotency-Key"), prefix = "_" + action.name() + "_";
        if (presented == null) {
            problem(res, 400, "Send an Idempotency-Key header: a UUIDv4 generated once per intent and reused on every retry.");
            return;
        }
        String intent = presented;
        int at = presented.indexOf(prefix);
        if (at > 0) { // a full key {scope}_{action}_{intent}
            if (!presented.substring(0, at).equals(scope)) {
                problem(res, 404, "No request with this key exists for this caller.");
                return;
            }
            intent = presented.substring(at + prefix.length());
        }
        if (!INTENT.matcher(intent).matches()) {
            problem(res, 400, "The Idempotency-Key must be a UUIDv4 or a ULID (26 to 128 letters, digits or dashes).");
            return;
        }
        String key = scope + prefix + intent;
        byte[] body = req.getInputStream().readNBytes(MAX_BODY + 1);
        if (body.length > MAX_BODY) {
            problem(res, 413, "The request body is larger than 1 MiB.");
            return;
        }
        String fingerprint = Fingerprint.of(action, parser.parse(body, req.getContentType()));
        IdempotencyStore.Claim claim;
        try {
            claim = store.claim(key, scope, fingerprint, action.lockTimeout());
        } catch (SQLException e) {
            throw new ServletException("idempotency: claim of key " + Fingerprint.shortHash(key) + " failed", e);
        }
        if (claim instanceof IdempotencyStore.Mismatch) {
            problem(res, 422, "This Idempotency-Key was used with a different request: send a new key for a new request.");
        } else if (claim instanceof IdempotencyStore.Busy b) {
            res.setHeader("Retry-After", Long.toString(b.retryAfterSeconds()));
            problem(res, 409, "A request with this Idempotency-Key is in progress: retry after Retry-After seconds.");
        } else if (claim instanceof IdempotencyStore.Replay r) {
            res.setStatus(r.status());
            res.setHeader("Idempotent-Replayed", "true");
            if (r.contentType() != null) {
                res.setContentType(r.contentType());
            }
            res.getOutputStream().write(r.body() == null ? new byte[0] : r.body());
        } else if (claim instanceof IdempotencyStore.Acquired a) {
            run(new CachedBody(req, body), res, chain, action, key, scope, a.lockVersion());
        }
    }

    /** Stops the heartbeats. */
    @Override
    public void destroy() {
        beats.shutdownNow();
    }

    private void run(HttpServletRequest req, HttpServletResponse res, FilterChain chain, Actions.Action action, String key, String scope, long version)
            throws IOException, ServletException {
        req.setAttribute(KEY_ATTRIBUTE, key);
        Buffered out = new Buffered(res);
        boolean kept = false;
        IdempotencyStore.Lease lease = store.hold(beats, key, scope, version, action);
        req.setAttribute(LEASE_ATTRIBUTE, lease);
        try {
            try {
                chain.doFilter(req, out);
            } finally {
                lease.close(); // before completing: no renewal races the fenced update
            }
            byte[] body = out.bytes();
            if (out.getStatus() < 500) { // a 5xx is no outcome: the retry runs again
                kept = true;
                if (!store.complete(key, scope, version, out.getStatus(), out.getContentType(), body)) {
                    LOG.warning("idempotency: key " + Fingerprint.shortHash(key) + ": lease lost before completion; the new holder's outcome stands");
                    problem(res, 409, "This request lost its lease to a retry, whose outcome stands: retry to get it.");
                    return;
                }
            }
            res.setStatus(out.getStatus());
            res.getOutputStream().write(body);
        } catch (SQLException e) {
            throw new ServletException("idempotency: completing key " + Fingerprint.shortHash(key) + " failed", e);
        } finally {
            if (!kept) {
                try {
                    store.release(key, scope, version);
                } catch (SQLException e) {
                    LOG.warning("idempotency: key " + Fingerprint.shortHash(key) + ": release failed, the lease ends by itself: " + e);
                }
            }
        }
    }

    private static void problem(HttpServletResponse res, int status, String detail) throws IOException {
        res.setStatus(status);
        res.setContentType("application/problem+json");
        res.getOutputStream().write(("{\"status\":" + status + ",\"detail\":\"" + detail + "\"}").getBytes(StandardCharsets.UTF_8));
    }

    /** The request with its body read once, for the fingerprint, and again by the handler. */
    private static final class CachedBody extends HttpServletRequestWrapper {
        private final byte[] body;

        CachedBody(HttpServletRequest req, byte[] body) {
            super(req);
            this.body = body;
        }

        @Override
        public ServletInputStream getInputStream() {
            ByteArrayInputStream in = new ByteArrayInputStream(body);
            return new ServletInputStream() {
                public int read() { return in.read(); }
                public boolean isFinished() { return in.available() == 0; }
                public boolean isReady() { return true; }
                public void setReadListener(ReadListener l) { throw new UnsupportedOperationException(); }
            };
        }
    }

    /** Keeps the handler's status and body, to store them before they are sent. */
    private static final class Buffered extends HttpServletResponseWrapper {
        private final ByteArrayOutputStream buf = new ByteArrayOutputStream();
        private PrintWriter writer;
        private int status = 200;

        Buffered(HttpServletResponse res) {
            super(res);
        }

        byte[] bytes() {
            if (writer != null) {
                writer.flush();
            }
            return buf.toByteArray();
        }

        @Override public void setStatus(int sc) { status = sc; }
        @Override public int getStatus() { return status; }
        @Override public void sendError(int sc) { status = sc; }
        @Override public void sendError(int sc, String msg) { status = sc; }
        @Override public void flushBuffer() {}
        @Override public void setContentLength(int len) {}
        @Override public void setContentLengthLong(long len) {}

        @Override
        public ServletOutputStream getOutputStream() {
            return new ServletOutputStream() {
                public void write(int b) { buf.write(b); }
                public void write(byte[] b, int off, int len) { buf.write(b, off, len); }
                public boolean isReady() { return true; }
                public void setWriteListener(WriteListener l) { throw new UnsupportedOperationException(); }
            };
        }

        @Override
        public PrintWriter getWriter() {
            if (writer == null) {
                writer = new PrintWriter(new OutputStreamWriter(buf, StandardCharsets.UTF_8));
            }
            return writer;
        }
    }
}
`)

var javaConsumer = javaTemplate("IdempotentConsumer.java", `package idempotency;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import javax.sql.DataSource;

/**
 * A consumer's action, once per message. A Kafka record has no message
 * id: key it by a business id the producer sets (an order id: the same
 * when the producer re-publishes), or by topic/partition/offset, which
 * names one record, so a redelivery but not a re-publish. With Spring Kafka:
 *
 * <pre>
 * &#64;KafkaListener(topics = "orders.paid")
 * void onOrderPaid(ConsumerRecord&lt;String, String&gt; r) throws Exception {
 *     var outcome = consumer.process(Actions.CONSUMERS.get({{q .Consumer.Name}}), tenantOf(r),
 *             IdempotentConsumer.intentOf(r.topic(), r.partition(), r.offset()), Map.of(),
 *             tx -&gt; settle(tx, r.value()));
 *     switch (outcome) {
 *         case BUSY -&gt; throw new IllegalStateException("in progress elsewhere"); // the error handler redelivers it later
 *         // The same intent with other significant fields: a producer bug. Never ack it silently:
 *         // a DefaultErrorHandler with a DeadLetterPublishingRecoverer, for which this exception
 *         // is not retryable, sends it to the dead-letter topic.
 *         case MISMATCH -&gt; throw new IllegalArgumentException("the intent came back with other fields");
 *         default -&gt; { } // DONE, DUPLICATE, or FENCED (another holder took the record over; its run stands)
 *     }
 * }
 * </pre>
 */
public final class IdempotentConsumer implements AutoCloseable {
    /** The action's writes, on the transaction its COMPLETED record commits in. */
    public interface Work {
        void run(Connection tx) throws Exception;
    }

    public enum Outcome { DONE, DUPLICATE, BUSY, MISMATCH, FENCED }

    private final DataSource db;
    private final IdempotencyStore store;
    private final ScheduledExecutorService beats = Executors.newScheduledThreadPool(1, r -> {
        Thread t = new Thread(r, "idempotency-heartbeat");
        t.setDaemon(true);
        return t;
    });

    public IdempotentConsumer(DataSource db, IdempotencyStore store) {
        this.db = db;
        this.store = store;
    }

    /** Stops the heartbeats. */
    @Override
    public void close() {
        beats.shutdownNow();
    }

    /** The intent of a message named by a business id. */
    public static String intentOf(String businessId) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(businessId.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The intent of one Kafka record. */
    public static String intentOf(String topic, int partition, long offset) {
        return intentOf(topic + "/" + partition + "/" + offset);
    }

    /**
     * Runs work once for (scope, intent): DONE when it ran and committed,
     * DUPLICATE when it had run, BUSY when another consumer holds it (do not
     * commit the offset), MISMATCH when the key came with other fields,
     * FENCED when the lease was lost meanwhile (its writes rolled back).
     */
    public Outcome process(Actions.Action action, String scope, String intent, Map<String, ?> fields, Work work) throws Exception {
        String key = scope + "_" + action.name() + "_" + intent;
        IdempotencyStore.Claim claim = store.claim(key, scope, Fingerprint.of(action, fields), action.lockTimeout());
        if (claim instanceof IdempotencyStore.Replay) {
            return Outcome.DUPLICATE;
        } else if (claim instanceof IdempotencyStore.Busy) {
            return Outcome.BUSY;
        } else if (claim instanceof IdempotencyStore.Mismatch) {
            return Outcome.MISMATCH;
        }
        long version = ((IdempotencyStore.Acquired) claim).lockVersion();
        try (Connection tx = db.getConnection()) {
            tx.setAutoCommit(false);
            try {
                IdempotencyStore.Lease lease = store.hold(beats, key, scope, version, action);
                try {
                    work.run(tx); // while a heartbeat keeps the lease
                } finally {
                    lease.close(); // before completing: no renewal races the fenced update
                }
                if (!store.complete(tx, key, scope, version, 200, null, new byte[0])) {
                    tx.rollback();
                    return Outcome.FENCED;
                }
                tx.commit();
                return Outcome.DONE;
            } catch (Exception e) {
                tx.rollback();
                store.release(key, scope, version);
                throw e;
            }
        }
    }
}
`)

var javaAdyen = javaTemplate("AdyenIdempotency.java", `package idempotency;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/**
 * Adyen's references, derived from the idempotency key alone, so that a
 * retry re-sends the same ones and Adyen answers the first payment again
 * (within its 7-day window) instead of charging twice: the payment's
 * reference = {key}_{step} (at most 80 characters, hashed beyond) and the
 * Idempotency-Key header = sha256({key}_{step}_{attempt}), 64 hex
 * characters. attempt grows only for a deliberate new attempt (after a
 * decline), never for a retry of a lost response.
 */
public final class AdyenIdempotency {
    private AdyenIdempotency() {}

    public static final String STEP = {{q .AdyenStep}};

    public static String reference(String key, String step) {
        String r = key + "_" + step;
        return r.length() <= 80 ? r : sha256(r);
    }

    public static String idempotencyKey(String key, String step, int attempt) {
        return sha256(key + "_" + step + "_" + attempt);
    }

    private static String sha256(String s) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
`)

var javaFingerprint = javaTemplate("Fingerprint.java", `package idempotency;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Map;

/**
 * The fingerprint of a request: SHA-256 over the action's name and its
 * significant fields in name order, each name and value length-prefixed
 * and the value type-tagged, as 64 lowercase hex characters. Fields not
 * listed in Actions (timestamps, trace ids, the key itself) are left out:
 * a retry differing only there is the same intent.{{range .HTTP}}
 * {{.Name}}: {{range $i, $f := .Fields}}{{if $i}}, {{end}}{{$f}}{{else}}the action only{{end}}.{{end}}{{range .Consumers}}
 * {{.Name}}: {{range $i, $f := .Fields}}{{if $i}}, {{end}}{{$f}}{{else}}the action only (its fields are not named yet){{end}}.{{end}}
 */
public final class Fingerprint {
    private Fingerprint() {}

    public static String of(Actions.Action action, Map<String, ?> body) {
        MessageDigest h = sha256();
        put(h, action.name().getBytes(StandardCharsets.UTF_8));
        for (String name : action.fields()) {
            Object v = body.get(name);
            put(h, name.getBytes(StandardCharsets.UTF_8));
            h.update(v == null ? (byte) 'z' : v instanceof Boolean ? (byte) 'b' : v instanceof Number ? (byte) 'n' : (byte) 's');
            put(h, canonical(v).getBytes(StandardCharsets.UTF_8));
        }
        return HexFormat.of().formatHex(h.digest());
    }

    /** Compares two fingerprints in constant time. */
    public static boolean matches(String stored, String presented) {
        return MessageDigest.isEqual(stored.getBytes(StandardCharsets.US_ASCII), presented.getBytes(StandardCharsets.US_ASCII));
    }

    /** A short hash of a key, for logs: a log line never holds a full key. */
    public static String shortHash(String key) {
        return HexFormat.of().formatHex(sha256().digest(key.getBytes(StandardCharsets.UTF_8))).substring(0, 12);
    }

    private static String canonical(Object v) {
        if (v == null) {
            return "";
        }
        if (v instanceof Number n && !(v instanceof Double d && (d.isNaN() || d.isInfinite()))) {
            return new BigDecimal(n.toString()).stripTrailingZeros().toPlainString(); // 10, 10.0 and 1E1 are one amount
        }
        return v.toString();
    }

    private static void put(MessageDigest h, byte[] b) {
        h.update(ByteBuffer.allocate(8).putLong(b.length).array());
        h.update(b);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
`)

var javaCleanup = javaTemplate("IdempotencyCleanup.java", `package idempotency;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.logging.Logger;
import javax.sql.DataSource;

/**
 * Deletes records past their expires_at (retention {{.Retention}}) in short
 * batches that leave room for claims; a PROCESSING record whose lease is
 * still live is kept until it ends. Run it from one scheduled executor per
 * instance (batches skip rows another instance holds), or in Spring as a
 * &#64;Component whose &#64;Scheduled(fixedDelay = 60_000) method calls runOnce().
 */
public final class IdempotencyCleanup implements AutoCloseable {
    static final String DELETE = """
            DELETE FROM idempotency_store
             WHERE ctid IN (SELECT ctid FROM idempotency_store
                             WHERE expires_at <= now() AND (status <> 'PROCESSING' OR locked_until <= now())
                             LIMIT ? FOR UPDATE SKIP LOCKED)""";
    private static final Logger LOG = Logger.getLogger(IdempotencyCleanup.class.getName());

    private final DataSource db;
    private final int batch;
    private final ScheduledExecutorService every = Executors.newSingleThreadScheduledExecutor();

    public IdempotencyCleanup(DataSource db, int batch) {
        if (batch < 1) {
            throw new IllegalArgumentException("IdempotencyCleanup: batch must be at least 1 (1000 is a good start), got " + batch);
        }
        this.db = db;
        this.batch = batch;
    }

    /** Deletes every expired record, a batch per statement; returns how many. */
    public int runOnce() throws SQLException {
        int total = 0;
        try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement(DELETE)) {
            c.setAutoCommit(true);
            s.setInt(1, batch);
            for (int n = batch; n == batch; total += n) {
                n = s.executeUpdate();
            }
        }
        return total;
    }

    /** Runs a pass now and then every period. */
    public void start(Duration period) {
        every.scheduleWithFixedDelay(() -> {
            try {
                runOnce();
            } catch (SQLException e) {
                LOG.warning("idempotency cleanup: " + e.getMessage());
            }
        }, 0, period.toMillis(), TimeUnit.MILLISECONDS);
    }

    @Override
    public void close() {
        every.shutdownNow();
    }
}
`)

const javaRun = `#!/bin/sh
# Compiles the kit and runs its tests with the JUnit 5 console launcher.
# Needs JDK 17+ and the jars of jakarta.servlet-api 5+, the PostgreSQL JDBC
# driver and junit-platform-console-standalone (Debian:
# libjakarta-servlet-api-java, libpostgresql-jdbc-java, junit5), and
# IDEMPOTENCY_TEST_JDBC_URL: a database the tests may create tables in.
set -eu
J=${JAVA_LIBS:-/usr/share/java}
CP="$J/jakarta-servlet-api.jar:$J/postgresql.jar"
JUNIT="$J/junit-platform-console-standalone.jar"
rm -rf build && mkdir -p build
javac -Xlint:all -Werror -d build -cp "$CP:$JUNIT" $(find src -name '*.java')
exec java -jar "$JUNIT" --disable-banner --fail-if-no-tests --details=tree -cp "build:$CP" --select-package idempotency
`

var javaHTTP = javaTemplate("Http.java", `package idempotency;

import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ReadListener;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.lang.reflect.Proxy;
import java.security.Principal;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/** Test doubles of a servlet request and response, enough for the filter: no container needed. */
final class Http {
    private Http() {}

    record Reply(int status, Map<String, String> headers, byte[] body) {
        String header(String name) {
            return headers.get(name.toLowerCase());
        }
    }

    static HttpServletRequest request(String route, String user, String key, byte[] body) {
        String[] mp = route.split(" ", 2);
        Map<String, Object> attributes = new HashMap<>();
        ByteArrayInputStream in = new ByteArrayInputStream(body);
        ServletInputStream sin = new ServletInputStream() {
            public int read() { return in.read(); }
            public boolean isFinished() { return in.available() == 0; }
            public boolean isReady() { return true; }
            public void setReadListener(ReadListener l) { throw new UnsupportedOperationException(); }
        };
        return (HttpServletRequest) Proxy.newProxyInstance(Http.class.getClassLoader(), new Class<?>[] {HttpServletRequest.class},
                (proxy, m, a) -> switch (m.getName()) {
                    case "getMethod" -> mp[0];
                    case "getRequestURI" -> mp[1];
                    case "getHeader" -> "Idempotency-Key".equalsIgnoreCase((String) a[0]) ? key : null;
                    case "getContentType" -> "application/x-www-form-urlencoded";
                    case "getInputStream" -> sin;
                    case "getUserPrincipal" -> user == null ? null : (Principal) () -> user;
                    case "getAttribute" -> attributes.get((String) a[0]);
                    case "setAttribute" -> attributes.put((String) a[0], a[1]) == null ? null : null;
                    default -> throw new UnsupportedOperationException("test request: " + m.getName());
                });
    }

    /** A response that keeps what the filter sends. */
    static final class Response {
        final ByteArrayOutputStream body = new ByteArrayOutputStream();
        final Map<String, String> headers = new TreeMap<>();
        int status = 200;
        final HttpServletResponse proxy = (HttpServletResponse) Proxy.newProxyInstance(Http.class.getClassLoader(),
                new Class<?>[] {HttpServletResponse.class}, (p, m, a) -> switch (m.getName()) {
                    case "setStatus" -> { status = (Integer) a[0]; yield null; }
                    case "getStatus" -> status;
                    case "setHeader", "addHeader" -> { headers.put(((String) a[0]).toLowerCase(), (String) a[1]); yield null; }
                    case "getHeader" -> headers.get(((String) a[0]).toLowerCase());
                    case "setContentType" -> { headers.put("content-type", (String) a[0]); yield null; }
                    case "getContentType" -> headers.get("content-type");
                    case "getOutputStream" -> new ServletOutputStream() {
                        public void write(int b) { body.write(b); }
                        public boolean isReady() { return true; }
                        public void setWriteListener(WriteListener l) { throw new UnsupportedOperationException(); }
                    };
                    default -> throw new UnsupportedOperationException("test response: " + m.getName());
                });

        Reply reply() {
            return new Reply(status, headers, body.toByteArray());
        }
    }
}
`)

var javaTests = javaTemplate("IdempotencyKitTest.java", `package idempotency;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import jakarta.servlet.FilterChain;
import jakarta.servlet.http.HttpServletResponse;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;

/** The scenarios of section 11 against a real PostgreSQL (IDEMPOTENCY_TEST_JDBC_URL). */
class IdempotencyKitTest {
    static final String ROUTE = {{q .Test.Route}};
    static final Actions.Action ACTION = Actions.HTTP.getOrDefault(ROUTE,
            new Actions.Action({{q .Test.Name}}, List.of({{strs .Test.Fields}}), Duration.ofSeconds({{.Test.LockSeconds}})));
    static final Actions.Action CONSUMER = Actions.CONSUMERS.getOrDefault({{q .Consumer.Name}},
            new Actions.Action({{q .Consumer.Name}}, List.of({{strs .Consumer.Fields}}), Duration.ofSeconds({{.Consumer.LockSeconds}})));
    static final Duration WAIT = Duration.ofSeconds(30); // a bound on every wait, never a pause
    static DataSource db;
    static IdempotencyStore store;

    @BeforeAll
    static void schema() throws Exception {
        String url = System.getenv("IDEMPOTENCY_TEST_JDBC_URL");
        assertNotNull(url, "set IDEMPOTENCY_TEST_JDBC_URL to a jdbc:postgresql:// URL of a database the tests may create tables in");
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(url);
        db = ds;
        try (Connection c = db.getConnection(); Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS idempotency_store, settlements");
            s.execute(Files.readString(Path.of("schema.sql")));
            s.execute("CREATE TABLE settlements (intent TEXT NOT NULL)");
        }
        store = new IdempotencyStore(db, Actions.RETENTION);
    }

    /** The significant fields with values; more pairs are added or replace them. */
    static byte[] form(String... more) {
        Map<String, String> f = new TreeMap<>();{{range .Test.Fields}}
        f.put({{q .}}, "v-" + {{q .}});{{end}}
        for (int i = 0; i < more.length; i += 2) {
            f.put(more[i], more[i + 1]);
        }
        List<String> pairs = new ArrayList<>();
        f.forEach((k, v) -> pairs.add(URLEncoder.encode(k, StandardCharsets.UTF_8) + "=" + URLEncoder.encode(v, StandardCharsets.UTF_8)));
        return String.join("&", pairs).getBytes(StandardCharsets.UTF_8);
    }

    static IdempotencyFilter filter(Actions.Action action) {
        return new IdempotencyFilter(store, Map.of(ROUTE, action),
                req -> req.getUserPrincipal() == null ? null : req.getUserPrincipal().getName(), IdempotencyFilter.FORM);
    }

    static Http.Reply call(IdempotencyFilter f, FilterChain app, String user, String key, byte[] body) throws Exception {
        Http.Response res = new Http.Response();
        f.doFilter(Http.request(ROUTE, user, key, body), res.proxy, app);
        return res.reply();
    }

    /** An application that counts its runs and answers a body unique to each run. */
    static FilterChain app(AtomicInteger runs) {
        return (rq, rs) -> {
            int n = runs.incrementAndGet();
            HttpServletResponse r = (HttpServletResponse) rs;
            r.setStatus(201);
            r.setContentType("application/json");
            r.getWriter().write("{\"run\":" + n + ",\"nanos\":" + System.nanoTime() + "}");
        };
    }

    static Object column(String key, String scope, String column) throws Exception {
        try (Connection c = db.getConnection();
             PreparedStatement s = c.prepareStatement("SELECT " + column + " FROM idempotency_store WHERE idempotency_key = ? AND user_id = ?")) {
            s.setString(1, key);
            s.setString(2, scope);
            try (ResultSet r = s.executeQuery()) {
                return r.next() ? r.getObject(1) : null;
            }
        }
    }

    static void sql(String statement, Object... args) throws Exception {
        try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement(statement)) {
            for (int i = 0; i < args.length; i++) {
                s.setObject(i + 1, args[i]);
            }
            s.execute();
        }
    }

    /** Polls the database until the lease of (key, scope) has ended by its clock. */
    static void awaitLeaseEnd(String key, String scope) throws Exception {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!Boolean.TRUE.equals(column(key, scope, "locked_until <= now()"))) {
            assertTrue(System.nanoTime() < deadline, "the lease did not end within " + WAIT);
            Thread.sleep(20); // polling a condition with a deadline
        }
    }

    static String key(String scope, String intent) {
        return scope + "_" + ACTION.name() + "_" + intent;
    }

    @Test
    void sameKeySequentialRunsOnceAndReplaysByteForByte() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        String intent = UUID.randomUUID().toString();
        Http.Reply first = call(filter(ACTION), app(runs), "alice", intent, form());
        Http.Reply second = call(filter(ACTION), app(runs), "alice", intent, form());
        assertEquals(1, runs.get(), "the action ran again for the same key");
        assertEquals(201, first.status());
        assertNull(first.header("Idempotent-Replayed"));
        assertEquals(201, second.status());
        assertEquals("true", second.header("Idempotent-Replayed"));
        assertArrayEquals(first.body(), second.body(), "the replay is not byte for byte");
        assertEquals("application/json", second.header("Content-Type"));
    }

    @Test
    void concurrentRequestsOnOneKeyRunOnce() throws Exception {
        int n = 8;
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch others = new CountDownLatch(n - 1);
        FilterChain held = (rq, rs) -> {
            try {
                assertTrue(others.await(WAIT.toSeconds(), TimeUnit.SECONDS), "the other requests did not finish while the holder ran");
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
            app(runs).doFilter(rq, rs);
        };
        String intent = UUID.randomUUID().toString();
        CyclicBarrier start = new CyclicBarrier(n);
        ExecutorService pool = Executors.newFixedThreadPool(n);
        try {
            List<Future<Http.Reply>> replies = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                replies.add(pool.submit(() -> {
                    start.await(WAIT.toSeconds(), TimeUnit.SECONDS);
                    Http.Reply r = call(filter(ACTION), held, "alice", intent, form());
                    if (r.status() != 201) {
                        others.countDown();
                    }
                    return r;
                }));
            }
            int created = 0, busy = 0;
            for (Future<Http.Reply> f : replies) {
                Http.Reply r = f.get(WAIT.toSeconds(), TimeUnit.SECONDS);
                if (r.status() == 201) {
                    created++;
                } else {
                    assertEquals(409, r.status());
                    assertNotNull(r.header("Retry-After"), "a 409 without Retry-After");
                    busy++;
                }
            }
            assertEquals(1, runs.get(), "the action ran more than once");
            assertEquals(1, created);
            assertEquals(n - 1, busy);
        } finally {
            pool.shutdownNow();
        }
    }
{{if .Test.Fields}}
    @Test
    void sameKeyOtherSignificantFieldIsRefusedAndRecordUnchanged() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        String intent = UUID.randomUUID().toString();
        Http.Reply first = call(filter(ACTION), app(runs), "alice", intent, form());
        Object fingerprint = column(key("alice", intent), "alice", "fingerprint");
        Http.Reply other = call(filter(ACTION), app(runs), "alice", intent, form({{q (index .Test.Fields 0)}}, "changed"));
        assertEquals(422, other.status());
        assertEquals(1, runs.get());
        assertEquals(fingerprint, column(key("alice", intent), "alice", "fingerprint"));
        assertArrayEquals(first.body(), (byte[]) column(key("alice", intent), "alice", "response_raw"));
        assertArrayEquals(first.body(), call(filter(ACTION), app(runs), "alice", intent, form()).body());
    }
{{end}}
    @Test
    void otherVolatileFieldIsReplayed() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        String intent = UUID.randomUUID().toString();
        Http.Reply first = call(filter(ACTION), app(runs), "alice", intent, form("sent_at", "2026-01-01T00:00:00Z"));
        Http.Reply again = call(filter(ACTION), app(runs), "alice", intent, form("sent_at", "2026-01-01T00:00:09Z"));
        assertEquals(1, runs.get());
        assertEquals("true", again.header("Idempotent-Replayed"));
        assertArrayEquals(first.body(), again.body());
    }

    /** Polls the database until its clock passes the end the lease of (key, scope) has now. */
    static void awaitClockPastLeaseEnd(String key, String scope) throws Exception {
        Object end = column(key, scope, "extract(epoch FROM locked_until)");
        assertNotNull(end, "the key holds no lease");
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (true) {
            try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement("SELECT extract(epoch FROM now()) > ?")) {
                s.setObject(1, end);
                try (ResultSet r = s.executeQuery()) {
                    assertTrue(r.next());
                    if (r.getBoolean(1)) {
                        return;
                    }
                }
            }
            assertTrue(System.nanoTime() < deadline, "the database's clock did not pass the lease's end within " + WAIT);
            Thread.sleep(20); // polling a condition with a deadline
        }
    }

    /** A handler that signals it runs, waits for release, then runs app(runs); lease receives the request's lease. */
    static FilterChain held(AtomicInteger runs, CountDownLatch entered, CountDownLatch release, AtomicReference<IdempotencyStore.Lease> lease) {
        return (rq, rs) -> {
            lease.set((IdempotencyStore.Lease) rq.getAttribute(IdempotencyFilter.LEASE_ATTRIBUTE));
            entered.countDown();
            try {
                assertTrue(release.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
            app(runs).doFilter(rq, rs);
        };
    }

    @Test
    void liveHolderKeepsItsLeasePastTheLockTimeout() throws Exception {
        IdempotencyFilter filter = filter(ACTION.withLockTimeout(Duration.ofSeconds(2)).withHeartbeat(Duration.ofMillis(250)));
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        String intent = UUID.randomUUID().toString(), k = key("alice", intent);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            Future<Http.Reply> holder = one.submit(() -> call(filter, held(runs, entered, release, new AtomicReference<>()), "alice", intent, form()));
            assertTrue(entered.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            awaitClockPastLeaseEnd(k, "alice"); // unrenewed, the lease as claimed would have ended
            Http.Reply retry = call(filter, app(runs), "alice", intent, form());
            assertEquals(409, retry.status(), "a retry took a live holder's lease over");
            assertNotNull(retry.header("Retry-After"));
            assertEquals(0, runs.get(), "the retry ran the action");
            release.countDown();
            Http.Reply done = holder.get(WAIT.toSeconds(), TimeUnit.SECONDS);
            assertEquals(201, done.status());
            assertEquals(1L, ((Number) column(k, "alice", "lock_version")).longValue(), "the lease changed hands");
            assertArrayEquals(done.body(), call(filter, app(runs), "alice", intent, form()).body());
            assertEquals(1, runs.get(), "the action ran more than once");
        } finally {
            one.shutdownNow();
            filter.destroy();
        }
    }

    @Test
    void leaseLostByTheHeartbeatIsRefusedAndTheNewHolderStands() throws Exception {
        IdempotencyFilter filter = filter(ACTION.withHeartbeat(Duration.ofMillis(100)));
        AtomicInteger runs = new AtomicInteger();
        AtomicReference<IdempotencyStore.Lease> lease = new AtomicReference<>();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        String intent = UUID.randomUUID().toString(), k = key("alice", intent);
        byte[] outcome = "{\"by\":\"the new holder\"}".getBytes(StandardCharsets.UTF_8);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            Future<Http.Reply> holder = one.submit(() -> call(filter, held(runs, entered, release, lease), "alice", intent, form()));
            assertTrue(entered.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            // another holder takes the key over: a new fencing token, its own lease
            sql("UPDATE idempotency_store SET lock_version = lock_version + 1, locked_until = now() + interval '1 minute' WHERE idempotency_key = ? AND user_id = ?", k, "alice");
            lease.get().lost().get(WAIT.toSeconds(), TimeUnit.SECONDS); // the heartbeat's renewal matched no row
            assertFalse(lease.get().held());
            long now = ((Number) column(k, "alice", "lock_version")).longValue();
            assertTrue(store.complete(k, "alice", now, 201, "application/json", outcome));
            release.countDown();
            Http.Reply old = holder.get(WAIT.toSeconds(), TimeUnit.SECONDS);
            assertEquals(409, old.status(), "the holder that lost its lease answered as if it had recorded");
            assertArrayEquals(outcome, (byte[]) column(k, "alice", "response_raw"), "the old holder overwrote the new one's outcome");
            Http.Reply replay = call(filter, app(runs), "alice", intent, form());
            assertEquals("true", replay.header("Idempotent-Replayed"));
            assertArrayEquals(outcome, replay.body());
            assertEquals(1, runs.get());
        } finally {
            one.shutdownNow();
            filter.destroy();
        }
    }

    @Test
    void heartbeatThatCannotKeepItsLeaseIsRefused() {
        for (Duration every : List.of(ACTION.lockTimeout(), ACTION.lockTimeout().plusSeconds(1), Duration.ofMillis(-1))) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ACTION.withHeartbeat(every));
            assertTrue(e.getMessage().contains("shorter than the lock timeout"), e.getMessage());
        }
        assertEquals(Duration.ZERO, ACTION.withHeartbeat(Duration.ZERO).heartbeat());
        assertEquals(Duration.ofSeconds(1), ACTION.withLockTimeout(Duration.ofSeconds(3)).heartbeat());
    }

    @Test
    void stalledHolderIsTakenOverAndItsCompletionFenced() throws Exception {
        // a paused holder (a stop-the-world pause, a partition): its heartbeat is silent too
        Actions.Action shortLease = ACTION.withLockTimeout(Duration.ofSeconds(3)).withHeartbeat(Duration.ZERO);
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        FilterChain stalled = (rq, rs) -> {
            entered.countDown();
            try {
                assertTrue(release.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
            app(runs).doFilter(rq, rs);
        };
        String intent = UUID.randomUUID().toString(), k = key("alice", intent);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            Future<Http.Reply> old = one.submit(() -> call(filter(shortLease), stalled, "alice", intent, form()));
            assertTrue(entered.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            assertEquals(409, call(filter(shortLease), app(runs), "alice", intent, form()).status(), "the live lease was not respected");
            awaitLeaseEnd(k, "alice");
            Http.Reply retry = call(filter(shortLease), app(runs), "alice", intent, form());
            assertEquals(201, retry.status());
            assertEquals(2L, ((Number) column(k, "alice", "lock_version")).longValue());
            release.countDown();
            assertEquals(409, old.get(WAIT.toSeconds(), TimeUnit.SECONDS).status(), "the fenced holder answered as if it had recorded");
            assertArrayEquals(retry.body(), (byte[]) column(k, "alice", "response_raw"), "the old holder's completion overwrote the new one's");
            assertArrayEquals(retry.body(), call(filter(shortLease), app(runs), "alice", intent, form()).body());
        } finally {
            one.shutdownNow();
        }
    }

    @Test
    void oldHolderCannotCompleteAfterTakeover() throws Exception {
        String k = key("alice", UUID.randomUUID().toString()), fp = Fingerprint.of(ACTION, Map.of());
        Duration lease = Duration.ofSeconds(1);
        long old = ((IdempotencyStore.Acquired) store.claim(k, "alice", fp, lease)).lockVersion();
        awaitLeaseEnd(k, "alice");
        long now = ((IdempotencyStore.Acquired) store.claim(k, "alice", fp, lease)).lockVersion();
        assertEquals(old + 1, now);
        assertFalse(store.complete(k, "alice", old, 201, "text/plain", "old".getBytes(StandardCharsets.UTF_8)), "the old holder completed");
        assertTrue(store.complete(k, "alice", now, 201, "text/plain", "new".getBytes(StandardCharsets.UTF_8)));
        assertArrayEquals("new".getBytes(StandardCharsets.UTF_8), (byte[]) column(k, "alice", "response_raw"));
    }

    @Test
    void consumerStalledHolderIsFencedAndItsWritesRolledBack() throws Exception {
        Actions.Action shortLease = CONSUMER.withLockTimeout(Duration.ofSeconds(3)).withHeartbeat(Duration.ZERO); // a paused consumer
        IdempotentConsumer consumer = new IdempotentConsumer(db, store);
        String intent = IdempotentConsumer.intentOf("orders.paid", 3, 4711L), k = "acct_42_" + CONSUMER.name() + "_" + intent;
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        IdempotentConsumer.Work settle = tx -> {
            try (PreparedStatement s = tx.prepareStatement("INSERT INTO settlements (intent) VALUES (?)")) {
                s.setString(1, intent);
                s.executeUpdate();
            }
        };
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            Future<IdempotentConsumer.Outcome> old = one.submit(() -> consumer.process(shortLease, "acct_42", intent, Map.of(), tx -> {
                settle.run(tx);
                entered.countDown();
                assertTrue(release.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            }));
            assertTrue(entered.await(WAIT.toSeconds(), TimeUnit.SECONDS));
            assertEquals(IdempotentConsumer.Outcome.BUSY, consumer.process(shortLease, "acct_42", intent, Map.of(), settle));
            awaitLeaseEnd(k, "acct_42");
            assertEquals(IdempotentConsumer.Outcome.DONE, consumer.process(shortLease, "acct_42", intent, Map.of(), settle));
            release.countDown();
            assertEquals(IdempotentConsumer.Outcome.FENCED, old.get(WAIT.toSeconds(), TimeUnit.SECONDS));
            assertEquals(IdempotentConsumer.Outcome.DUPLICATE, consumer.process(shortLease, "acct_42", intent, Map.of(), settle));
            try (Connection c = db.getConnection(); PreparedStatement s = c.prepareStatement("SELECT count(*) FROM settlements WHERE intent = ?")) {
                s.setString(1, intent);
                try (ResultSet r = s.executeQuery()) {
                    assertTrue(r.next());
                    assertEquals(1, r.getInt(1), "the message was settled more than once");
                }
            }
        } finally {
            one.shutdownNow();
        }
    }

    @Test
    void retryAfterExpiryIsNew() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        String intent = UUID.randomUUID().toString();
        call(filter(ACTION), app(runs), "alice", intent, form());
        sql("UPDATE idempotency_store SET expires_at = now() - interval '1 second' WHERE idempotency_key = ? AND user_id = ?", key("alice", intent), "alice");
        Http.Reply again = call(filter(ACTION), app(runs), "alice", intent, form());
        assertEquals(2, runs.get(), "an expired key was replayed");
        assertEquals(201, again.status());
        assertNull(again.header("Idempotent-Replayed"));
    }

    @Test
    void keyOfAnotherScopeIs404NeverAReplay() throws Exception {
        AtomicInteger runs = new AtomicInteger();
        String intent = UUID.randomUUID().toString();
        Http.Reply alice = call(filter(ACTION), app(runs), "alice", intent, form());
        Http.Reply bob = call(filter(ACTION), app(runs), "bob", key("alice", intent), form());
        assertEquals(404, bob.status());
        assertEquals(1, runs.get());
        Http.Reply bobOwn = call(filter(ACTION), app(runs), "bob", intent, form());
        assertEquals(201, bobOwn.status());
        assertNull(bobOwn.header("Idempotent-Replayed"));
        assertFalse(java.util.Arrays.equals(alice.body(), bobOwn.body()), "bob got alice's answer");
        assertEquals(401, call(filter(ACTION), app(runs), null, intent, form()).status());
    }
{{if .Adyen}}
    /** A fake Adyen that honours the Idempotency-Key: the same key answers the first payment again. */
    static final class FakeAdyen {
        final Map<String, String[]> byKey = new java.util.concurrent.ConcurrentHashMap<>(); // key -> reference, pspReference
        final AtomicInteger charges = new AtomicInteger();
        final List<String> references = java.util.Collections.synchronizedList(new ArrayList<>());

        String authorise(String reference, String idempotencyKey) {
            references.add(reference);
            String[] done = byKey.computeIfAbsent(idempotencyKey, k -> new String[] {reference, "psp-" + charges.incrementAndGet()});
            assertEquals(done[0], reference, "Adyen refuses an Idempotency-Key reused with another reference");
            return done[1];
        }
    }

    @Test
    void providerResponseLostRetryResendsTheSameReferenceAndChargesOnce() throws Exception {
        FakeAdyen adyen = new FakeAdyen();
        AtomicInteger attempts = new AtomicInteger();
        FilterChain pay = (rq, rs) -> {
            String key = (String) rq.getAttribute(IdempotencyFilter.KEY_ATTRIBUTE);
            String psp = adyen.authorise(AdyenIdempotency.reference(key, AdyenIdempotency.STEP), AdyenIdempotency.idempotencyKey(key, AdyenIdempotency.STEP, 1));
            HttpServletResponse r = (HttpServletResponse) rs;
            if (attempts.incrementAndGet() == 1) {
                r.sendError(502); // Adyen charged, but its answer was lost on the way back
                return;
            }
            r.setStatus(201);
            r.getWriter().write("{\"pspReference\":\"" + psp + "\"}");
        };
        String intent = UUID.randomUUID().toString();
        assertEquals(502, call(filter(ACTION), pay, "alice", intent, form()).status());
        Http.Reply retry = call(filter(ACTION), pay, "alice", intent, form());
        assertEquals(201, retry.status(), "the retry did not take over the released claim");
        assertEquals(1, adyen.charges.get(), "Adyen charged twice");
        assertEquals(List.of(key("alice", intent) + "_" + AdyenIdempotency.STEP, key("alice", intent) + "_" + AdyenIdempotency.STEP), adyen.references);
        assertEquals("{\"pspReference\":\"psp-1\"}", new String(retry.body(), StandardCharsets.UTF_8));
    }
{{end}}
    @Test
    void cleanupDeletesExpiredRecordsAndKeepsLiveOnes() throws Exception {
        String insert = "INSERT INTO idempotency_store (idempotency_key, user_id, fingerprint, status, lock_version, locked_until, expires_at) "
                + "VALUES (?, 'cleanup', repeat('0', 64), ?, 1, now() + ?::interval, now() + ?::interval)";
        sql(insert, "expired", "COMPLETED", "0 seconds", "-1 hour");
        sql(insert, "live", "COMPLETED", "0 seconds", "1 hour");
        sql(insert, "expired-but-held", "PROCESSING", "1 hour", "-1 second");
        sql(insert, "expired-orphan", "PROCESSING", "-1 second", "-1 second");
        try (IdempotencyCleanup cleanup = new IdempotencyCleanup(db, 1)) {
            assertTrue(cleanup.runOnce() >= 2);
        }
        List<String> left = new ArrayList<>();
        try (Connection c = db.getConnection(); Statement s = c.createStatement();
             ResultSet r = s.executeQuery("SELECT idempotency_key FROM idempotency_store WHERE user_id = 'cleanup' ORDER BY 1")) {
            while (r.next()) {
                left.add(r.getString(1));
            }
        }
        assertEquals(List.of("expired-but-held", "live"), left);
        assertNotEquals(null, Fingerprint.shortHash("k"));
    }
}
`)
