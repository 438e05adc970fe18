/*
 * test_sql_text.c - the SQL text normaliser (sql_text.h): string literals (standard,
 * E'', prefixed, dollar-quoted, unterminated) and numbers (signs, exponents, hex) are
 * masked, identifiers and parameter markers kept, comments dropped, whitespace collapsed,
 * IN lists and repeated VALUES rows collapsed; H2 and PostgreSQL statements; UTF-8 in
 * and out; every buffer size from 1 up (a prefix cut on a character boundary, nothing
 * written past it); input cut anywhere (nothing read past it); large inputs in linear
 * time; and a random mix of statement pieces that must never leak a literal.
 *
 * Every expectation is also checked for: the result normalises to itself; each shorter
 * buffer gets the longest prefix that fits; the input is read from a buffer of exactly
 * its size (AddressSanitizer catches a read past it) and the output is followed by
 * guard bytes that must stay untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sql_text.h"

#define GUARD 16                   /* bytes after the output buffer that must stay as they were */
#define GUARD_BYTE 0xa5            /* what they hold */
#define ALL_CAPS_MAX 600           /* results up to this long are checked with every smaller buffer */
#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

/* Normalises in_len bytes of in (copied to a buffer of exactly that size) into a buffer of
 * out_cap bytes followed by guard bytes; fails when the result's length is wrong or a guard
 * byte changed. Returns the result (malloc'd). */
static char *normalise(int line, const char *in, size_t in_len, size_t out_cap)
{
    char *copy = in_len ? malloc(in_len) : NULL;
    char *out = malloc(out_cap + GUARD);
    assert_non_null(out);
    if (in_len) {
        assert_non_null(copy);
        memcpy(copy, in, in_len);
    }
    memset(out, GUARD_BYTE, out_cap + GUARD);
    size_t n = cmr_sql_normalise(copy, in_len, out, out_cap);
    free(copy);
    for (size_t i = out_cap; i < out_cap + GUARD; i++)
        if ((unsigned char)out[i] != GUARD_BYTE)
            fail_msg("line %d: out_cap %zu: byte %zu past the buffer written", line, out_cap, i - out_cap);
    if (out_cap > 0 && (n >= out_cap || strlen(out) != n))
        fail_msg("line %d: out_cap %zu: returned %zu for a result of %zu bytes", line, out_cap, n, strlen(out));
    return out;
}

/* The longest prefix of full (len bytes) that a buffer of out_cap bytes gets: cut on a
 * character boundary, without a space left at the cut. */
static size_t expected_cut(const char *full, size_t len, size_t out_cap)
{
    if (out_cap - 1 >= len)
        return len;
    size_t k = out_cap - 1;
    while (k > 0 && ((unsigned char)full[k] & 0xc0) == 0x80)
        k--;
    if (k > 0 && full[k - 1] == ' ')
        k--;
    return k;
}

static void check_cuts(int line, const char *in, size_t in_len, const char *full)
{
    size_t len = strlen(full);
    for (size_t cap = 1; cap <= len + 2; cap++) {
        char *out = normalise(line, in, in_len, cap);
        size_t want = expected_cut(full, len, cap);
        if (strlen(out) != want || memcmp(out, full, want) != 0)
            fail_msg("line %d: out_cap %zu: got \"%s\", want the first %zu bytes of \"%s\"", line, cap, out, want,
                     full);
        free(out);
    }
}

/* The normalisation of in (in_len bytes) is want, and holds for every shorter buffer and
 * when normalised again. */
static void expect_n(int line, const char *in, size_t in_len, const char *want)
{
    size_t cap = 3 * in_len + 2; /* room for any result */
    char *out = normalise(line, in, in_len, cap);
    if (strcmp(out, want) != 0)
        fail_msg("line %d: normalise(\"%.*s\")\n  got  \"%s\"\n  want \"%s\"", line, (int)in_len, in, out, want);
    char *again = normalise(line, out, strlen(out), cap);
    if (strcmp(again, out) != 0)
        fail_msg("line %d: not stable: \"%s\" normalises to \"%s\"", line, out, again);
    free(again);
    if (strlen(out) <= ALL_CAPS_MAX)
        check_cuts(line, in, in_len, out);
    free(out);
}

#define EXPECT(in, want) expect_n(__LINE__, in, strlen(in), want)
#define EXPECT_N(in, len, want) expect_n(__LINE__, in, len, want)

static void test_string_literals(void **state)
{
    (void)state;
    EXPECT("SELECT * FROM users WHERE name = 'alice'", "SELECT * FROM users WHERE name = ?");
    EXPECT("WHERE a = 'it''s' AND b = '' AND c=''''", "WHERE a = ? AND b = ? AND c=?");
    /* a backslash in '...' is a character: 'C:\' ends there */
    EXPECT("WHERE path = 'C:\\' AND pw = 'hunter2'", "WHERE path = ? AND pw = ?");
    /* E'...': backslash escapes, '' too, any case */
    EXPECT("WHERE a = E'it\\'s' AND b = 'x'", "WHERE a = ? AND b = ?");
    EXPECT("WHERE a = e'\\\\' AND b = E'a''b\\n'", "WHERE a = ? AND b = ?");
    /* only a lone E is that prefix: here the backslash is a character again */
    EXPECT("SELECT the'a\\' , 'secret'", "SELECT the? , ?");
    EXPECT("VALUES (N'name', X'0A0b', b'0101', U&'d\\0061t\\+000061', n'x')", "VALUES (?, ?, ?, ?, ?)");
    /* unterminated: masked to the end */
    EXPECT("WHERE pw = 'hunter2", "WHERE pw = ?");
    EXPECT("WHERE pw = 'it''", "WHERE pw = ?");
    EXPECT("WHERE pw = E'abc\\' AND x = 1", "WHERE pw = ?");
    EXPECT("WHERE pw = E'abc\\", "WHERE pw = ?");
    EXPECT("'", "?");
    EXPECT("''''", "?");
}

static void test_dollar_quotes(void **state)
{
    (void)state;
    EXPECT("SELECT $$it's$$, $body$ a $$ b $x$ c $body$ FROM t", "SELECT ?, ? FROM t");
    EXPECT("DO $$ BEGIN RAISE NOTICE 'x'; END $$;", "DO ?;");
    EXPECT("SELECT $_f1$ x $_f1$, $$$$", "SELECT ?, ?");
    EXPECT("SELECT $a$ unterminated 'secret'", "SELECT ?");
    EXPECT("SELECT $$", "SELECT ?");
    /* not dollar quotes: parameters, a $ inside a word, a lone $ */
    EXPECT("WHERE a = $1 AND b = $23", "WHERE a = $1 AND b = $23");
    EXPECT("SELECT a$b$, c$ FROM t$1", "SELECT a$b$, c$ FROM t$1");
    EXPECT("SELECT $ x, $x FROM t", "SELECT $ x, $x FROM t");
    /* a tag of 64 bytes is searched for; a longer one masks the rest */
    char sql[256];
    const char *tag64 = "t123456789012345678901234567890123456789012345678901234567890123";
    snprintf(sql, sizeof sql, "SELECT $%s$ body $%s$, b", tag64, tag64);
    EXPECT(sql, "SELECT ?, b");
    snprintf(sql, sizeof sql, "SELECT $%sX$ body $%sX$, b", tag64, tag64);
    EXPECT(sql, "SELECT ?");
}

static void test_numbers(void **state)
{
    (void)state;
    EXPECT("SELECT a FROM t LIMIT 10 OFFSET 20", "SELECT a FROM t LIMIT ? OFFSET ?");
    EXPECT("x = 3.14 AND y = .5 AND z = 1. AND w = 6.02e23 AND v = 1.5E-3 AND u = 2e+4",
           "x = ? AND y = ? AND z = ? AND w = ? AND v = ? AND u = ?");
    EXPECT("x = 0x1F AND y = 0XFF AND z = 10L AND w = 1_000 AND v = 1e",
           "x = ? AND y = ? AND z = ? AND w = ? AND v = ?");
    EXPECT("SELECT 1abc, 12e5x", "SELECT ?, ?");
    /* digits inside names are not literals */
    EXPECT("SELECT t1.col_2, \"x1\", `y2`, x1y2z3 FROM s3.t1 JOIN t2 ON t1.id = t2.id",
           "SELECT t1.col_2, \"x1\", `y2`, x1y2z3 FROM s3.t1 JOIN t2 ON t1.id = t2.id");
    EXPECT("SELECT t.5, a.b1", "SELECT t.?, a.b1");
}

static void test_signs(void **state)
{
    (void)state;
    /* where a value is expected, a sign directly before the digits is the literal's */
    EXPECT("x = -5", "x = ?");
    EXPECT("x=-5 AND y<-1 AND z>=-2.5 AND w<>+3", "x=? AND y<? AND z>=? AND w<>?");
    EXPECT("f(-1, +2, -.5)", "f(?, ?, ?)");
    EXPECT("-1", "?");
    EXPECT("SELECT -1, CASE WHEN a THEN -1 ELSE -2 END", "SELECT ?, CASE WHEN a THEN ? ELSE ? END");
    EXPECT("WHERE x BETWEEN -5 AND -1 OR y = 1 LIMIT -1", "WHERE x BETWEEN ? AND ? OR y = ? LIMIT ?");
    EXPECT("x*-2", "x*?");
    /* after an operand it is an operator */
    EXPECT("a-1", "a-?");
    EXPECT("a - 1", "a - ?");
    EXPECT("1-1", "?-?");
    EXPECT("(a)-1, a[1]-1, ?-1, \"q\"-1, 'x'-1", "(a)-?, a[?]-?, ?-?, \"q\"-?, ?-?");
    /* not directly before the digits: the sign stays */
    EXPECT("x = - 5", "x = - ?");
    EXPECT("a-/**/-1", "a- ?");
}

static void test_identifiers(void **state)
{
    (void)state;
    EXPECT("SELECT \"Order\", \"a \"\"quoted\"\" name\" FROM \"My Table\"",
           "SELECT \"Order\", \"a \"\"quoted\"\" name\" FROM \"My Table\"");
    EXPECT("SELECT `select`, `a``b` FROM `db`.`t`", "SELECT `select`, `a``b` FROM `db`.`t`");
    /* quotes and comment markers inside identifiers are characters */
    EXPECT("SELECT \"it's\", \"a--b\", \"c/*d\", `e'f` FROM t WHERE x = 1",
           "SELECT \"it's\", \"a--b\", \"c/*d\", `e'f` FROM t WHERE x = ?");
    EXPECT("SELECT \"a  b\t\" FROM t", "SELECT \"a  b" REPLACEMENT "\" FROM t");
    EXPECT("SELECT \"unterminated 'x", "SELECT \"unterminated 'x");
}

static void test_comments(void **state)
{
    (void)state;
    EXPECT("SELECT a -- the password is 'x'\nFROM t", "SELECT a FROM t");
    EXPECT("SELECT a--comment\r\nFROM t", "SELECT a FROM t");
    EXPECT("SELECT a /* user='bob' */ FROM t", "SELECT a FROM t");
    EXPECT("SELECT a/**/FROM t", "SELECT a FROM t");
    EXPECT("/* it's */ SELECT 1 /* trailing */", "SELECT ?");
    EXPECT("SELECT 1 -- no newline 'x", "SELECT ?");
    EXPECT("SELECT 1 /* unterminated 'x", "SELECT ?");
    EXPECT("SELECT /* a /* nested 'x' */ 'y' */ 1", "SELECT ?");
    EXPECT("SELECT 5--3", "SELECT ?");
    EXPECT("SELECT 2/*/ x */", "SELECT ?");
    EXPECT("SELECT a */ b", "SELECT a */ b");
    /* comment markers inside literals are characters */
    EXPECT("SELECT 'a -- b', '/* c */', $$ -- $$ FROM t WHERE a = '--' AND b = 'secret'",
           "SELECT ?, ?, ? FROM t WHERE a = ? AND b = ?");
    EXPECT("SELECT 'x /* y' FROM t -- z", "SELECT ? FROM t");
}

static void test_whitespace(void **state)
{
    (void)state;
    EXPECT("  SELECT\t\ta,\r\n  b\n FROM   t  ", "SELECT a, b FROM t");
    EXPECT("", "");
    EXPECT("   \t\r\n ", "");
    EXPECT("/* only */ -- comments", "");
    EXPECT("\x7f\x01", "");
    /* control bytes, NUL too, separate tokens */
    EXPECT_N("SELECT\001a\0b\037", 11, "SELECT a b");
    cmr_sql_normalise(NULL, 0, (char[1]){'x'}, 1); /* NULL with no bytes: allowed */
}

static void test_in_lists(void **state)
{
    (void)state;
    EXPECT("WHERE id IN (1, 2, 3)", "WHERE id IN (?)");
    EXPECT("where id in (?,?,?)", "where id in (?)");
    EXPECT("WHERE id NOT IN ( 'a' , 'b' )", "WHERE id NOT IN (?)");
    EXPECT("WHERE id IN(1)", "WHERE id IN(?)");
    EXPECT("WHERE id In (-1, 2.5, E'x', $$y$$, ?)", "WHERE id In (?)");
    EXPECT("WHERE id IN /* c */ (1, /* d */ 2 -- e\n)", "WHERE id IN (?)");
    EXPECT("WHERE a IN (1, 2) AND b IN ('x') AND c IN (?, ?)", "WHERE a IN (?) AND b IN (?) AND c IN (?)");
    /* kept, masked item by item: anything but literals and ? in the list */
    EXPECT("WHERE id IN (1, a)", "WHERE id IN (?, a)");
    EXPECT("WHERE id IN (?, 2, $1)", "WHERE id IN (?, ?, $1)");
    EXPECT("WHERE id IN (SELECT id FROM t WHERE x = 1)", "WHERE id IN (SELECT id FROM t WHERE x = ?)");
    EXPECT("WHERE id IN ()", "WHERE id IN ()");
    EXPECT("WHERE id IN (1,, 2)", "WHERE id IN (?,, ?)");
    EXPECT("WHERE (a, b) IN ((1, 2), (3, 4))", "WHERE (a, b) IN ((?, ?), (?, ?))");
    EXPECT("WHERE a IN (1, 2", "WHERE a IN (?, ?"); /* cut before the ) */
    /* other lists keep their length */
    EXPECT("WHERE f(1, 2, 3) = 1 AND \"in\" (1, 2)", "WHERE f(?, ?, ?) = ? AND \"in\" (?, ?)");
}

static void test_values_rows(void **state)
{
    (void)state;
    EXPECT("INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'), (3, 'z')", "INSERT INTO t (a, b) VALUES (?, ?)");
    EXPECT("insert into t values (?, ?), (?, ?)", "insert into t values (?, ?)");
    EXPECT("INSERT INTO t VALUES (1), (2);", "INSERT INTO t VALUES (?);");
    EXPECT("INSERT INTO t VALUES (1,2) , ( 3 , 4 ) ON CONFLICT (a) DO UPDATE SET b = 5",
           "INSERT INTO t VALUES (?,?) ON CONFLICT (a) DO UPDATE SET b = ?");
    EXPECT("INSERT INTO t VALUES ( 1 , 2 )", "INSERT INTO t VALUES ( ? , ? )");
    /* a row of another shape stops the collapse */
    EXPECT("INSERT INTO t VALUES (1, 2), (3)", "INSERT INTO t VALUES (?, ?), (?)");
    EXPECT("INSERT INTO t VALUES (1), (2), (a), (3), (4)", "INSERT INTO t VALUES (?), (a), (?), (?)");
    EXPECT("INSERT INTO t VALUES (1, now()), (2, now())", "INSERT INTO t VALUES (?, now()), (?, now())");
    EXPECT("INSERT INTO t VALUES (1, 2), (3, 4", "INSERT INTO t VALUES (?, ?), (?, ?"); /* cut */
}

static void test_markers_and_case(void **state)
{
    (void)state;
    EXPECT("select * from T where A = ? and b = ?", "select * from T where A = ? and b = ?");
    EXPECT("SeLeCt a FrOm t WhErE b=?", "SeLeCt a FrOm t WhErE b=?");
    EXPECT("SELECT data ?? 'key' FROM t", "SELECT data ?? ? FROM t");
    /* JDBC escapes */
    EXPECT("{call proc(?, 'x', 42)}", "{call proc(?, ?, ?)}");
    EXPECT("SELECT {ts '2024-01-01 00:00:00'}, {fn UCASE('a')}", "SELECT {ts ?}, {fn UCASE(?)}");
}

static void test_h2_statements(void **state)
{
    (void)state;
    EXPECT("MERGE INTO PUBLIC.USERS KEY(ID) VALUES (1, 'bob', X'0A0B', TRUE)",
           "MERGE INTO PUBLIC.USERS KEY(ID) VALUES (?, ?, ?, TRUE)");
    EXPECT("SELECT * FROM \"PUBLIC\".\"ORDERS\" WHERE \"ID\" = 42 AND CREATED > TIMESTAMP '2024-01-01 10:00:00' "
           "FETCH FIRST 10 ROWS ONLY",
           "SELECT * FROM \"PUBLIC\".\"ORDERS\" WHERE \"ID\" = ? AND CREATED > TIMESTAMP ? FETCH FIRST ? ROWS ONLY");
    EXPECT("CALL NEXT VALUE FOR SEQ_1", "CALL NEXT VALUE FOR SEQ_1");
    EXPECT("SELECT * FROM T WHERE NAME LIKE 'A%' ESCAPE '\\' LIMIT 5",
           "SELECT * FROM T WHERE NAME LIKE ? ESCAPE ? LIMIT ?");
    EXPECT("CREATE ALIAS MY_F AS $$ String f(String s) { return \"x\"; } $$", "CREATE ALIAS MY_F AS ?");
    EXPECT("INSERT INTO ACCOUNTS(ID, OWNER, BALANCE) VALUES(?, ?, ?)",
           "INSERT INTO ACCOUNTS(ID, OWNER, BALANCE) VALUES(?, ?, ?)");
}

static void test_postgresql_statements(void **state)
{
    (void)state;
    EXPECT("SELECT id::text, '5'::int, ARRAY[1, 2] FROM t WHERE tags @> ARRAY['a'] AND j ? 'k' AND d > now() - "
           "INTERVAL '1 day'",
           "SELECT id::text, ?::int, ARRAY[?, ?] FROM t WHERE tags @> ARRAY[?] AND j ? ? AND d > now() - INTERVAL ?");
    EXPECT("INSERT INTO users (name, pw) VALUES ($1, $2) RETURNING id",
           "INSERT INTO users (name, pw) VALUES ($1, $2) RETURNING id");
    EXPECT("SELECT E'\\\\', E'\\n' || 'x'", "SELECT ?, ? || ?");
    EXPECT("UPDATE t SET a = -1, b = +2.5e-3 WHERE c <> -0x10", "UPDATE t SET a = ?, b = ? WHERE c <> ?");
    EXPECT("SELECT x FROM t WHERE y = ANY('{1,2}'::int[]) OFFSET 5",
           "SELECT x FROM t WHERE y = ANY(?::int[]) OFFSET ?");
    EXPECT("SET search_path TO 'app', public; SELECT set_config('app.user', 'bob', false)",
           "SET search_path TO ?, public; SELECT set_config(?, ?, false)");
}

static void test_utf8(void **state)
{
    (void)state;
    EXPECT("SELECT größe, \"名前\" FROM straße WHERE x = 'ünïcødé'", "SELECT größe, \"名前\" FROM straße WHERE x = ?");
    EXPECT("€1", "€1");
    /* each byte of an invalid sequence becomes U+FFFD: a stray byte, overlong, surrogate, past U+10FFFF */
    EXPECT("SELECT a\377b FROM t", "SELECT a" REPLACEMENT "b FROM t");
    EXPECT("SELECT \xc0\xaf, \xed\xa0\x80, \xf4\x90\x80\x80",
           "SELECT " REPLACEMENT REPLACEMENT ", " REPLACEMENT REPLACEMENT REPLACEMENT
           ", " REPLACEMENT REPLACEMENT REPLACEMENT REPLACEMENT);
    EXPECT("SELECT \"\xfe\"", "SELECT \"" REPLACEMENT "\"");
    EXPECT("SELECT gr\xc3", "SELECT gr" REPLACEMENT);                            /* input cut inside "grö" */
    EXPECT("WHERE x = '\377\376abc' AND y = $$\xc3$$", "WHERE x = ? AND y = ?"); /* in literals: masked */
    EXPECT("SELECT \xf0\x9f\x98\x80 FROM t", "SELECT \xf0\x9f\x98\x80 FROM t");
}

/* Buffers too small for the result: cut on a character boundary, never past out_cap. */
static void test_small_buffers(void **state)
{
    (void)state;
    const char *sql = "SELECT 1";
    struct {
        size_t cap;
        const char *want;
    } cuts[] = {{1, ""}, {2, "S"}, {5, "SELE"}, {8, "SELECT"}, {9, "SELECT ?"}, {100, "SELECT ?"}};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        char *out = normalise(__LINE__, sql, strlen(sql), cuts[k].cap);
        assert_string_equal(out, cuts[k].want);
        free(out);
    }
    /* "ö" is 2 bytes, "€" 3: a character that does not fit is left out whole */
    char *out = normalise(__LINE__, "SELECT größe", strlen("SELECT größe"), 11);
    assert_string_equal(out, "SELECT gr");
    free(out);
    out = normalise(__LINE__, "SELECT größe", strlen("SELECT größe"), 12);
    assert_string_equal(out, "SELECT grö");
    free(out);
    out = normalise(__LINE__, "€", 3, 3);
    assert_string_equal(out, "");
    free(out);
    out = normalise(__LINE__, "a \xff", 3, 4); /* a replacement character is cut like any other */
    assert_string_equal(out, "a");
    free(out);
    /* out_cap 0: nothing written */
    char none[GUARD];
    memset(none, GUARD_BYTE, sizeof none);
    assert_int_equal(cmr_sql_normalise(sql, strlen(sql), none, 0), 0);
    for (size_t i = 0; i < sizeof none; i++)
        assert_int_equal((unsigned char)none[i], GUARD_BYTE);
}

/* Input cut anywhere (as the probe cuts long statements): read only up to in_len, and a
 * literal cut in the middle stays masked. */
static void test_cut_input(void **state)
{
    (void)state;
    const char *sql = "SELECT 'secret' FROM t WHERE a = 12 /* x */ AND b = $$body$$";
    EXPECT_N(sql, 12, "SELECT ?"); /* SELECT 'secr */
    EXPECT_N(sql, 34, "SELECT ? FROM t WHERE a = ?");
    EXPECT_N(sql, 40, "SELECT ? FROM t WHERE a = ?");
    EXPECT_N(sql, 56, "SELECT ? FROM t WHERE a = ? AND b = ?");
    EXPECT_N(sql, 0, "");
    /* every cut of a statement with every kind of token: its prefix never shows a literal */
    const char *all = "SELECT \"c1\", `c2`, t.c3 FROM t /* 'x1' */ WHERE a IN (1, 'x2') AND b = E'x3\\'' -- x4\n"
                      "AND c = $q$x5$q$ AND d = -1.5e3 AND e = N'x6' AND f = ? AND g = $1";
    size_t len = strlen(all);
    for (size_t cut = 0; cut <= len; cut++) {
        char *out = normalise(__LINE__, all, cut, 3 * cut + 2);
        if (strstr(out, "x1") || strstr(out, "x2") || strstr(out, "x3") || strstr(out, "x4") || strstr(out, "x5") ||
            strstr(out, "x6") || strchr(out, '\''))
            fail_msg("cut at %zu: a literal leaked: \"%s\"", cut, out);
        free(out);
    }
}

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC); /* (C17: no CLOCK_MONOTONIC without _GNU_SOURCE) */
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Appends copies of piece to buf (NUL-terminated) until it holds at least len bytes. */
static void fill(char *buf, size_t cap, size_t len, const char *piece)
{
    size_t n = strlen(buf), p = strlen(piece);
    while (n < len && n + p < cap) {
        memcpy(buf + n, piece, p);
        n += p;
    }
    buf[n] = '\0';
}

static void test_large_inputs(void **state)
{
    (void)state;
    enum { BIG = 10000, CAP = BIG + 64 };
    char *sql = malloc(CAP);
    assert_non_null(sql);

    strcpy(sql, "SELECT * FROM t WHERE id IN (");
    fill(sql, CAP, BIG, "12345, 'abc', ");
    strcat(sql, "1)");
    assert_true(strlen(sql) >= BIG);
    EXPECT(sql, "SELECT * FROM t WHERE id IN (?)");

    strcpy(sql, "INSERT INTO t (a, b) VALUES (1, 'a')");
    fill(sql, CAP, BIG, ", (2, 'b')");
    EXPECT(sql, "INSERT INTO t (a, b) VALUES (?, ?)");

    strcpy(sql, "SELECT '");
    fill(sql, CAP, BIG, "secret ");
    EXPECT(sql, "SELECT ?");

    /* names only: the result is cut as the publisher's buffer cuts it */
    sql[0] = '\0';
    fill(sql, CAP, BIG, "column_a, ");
    char *out = normalise(__LINE__, sql, strlen(sql), 2049);
    assert_int_equal(strlen(out), 2048);
    assert_memory_equal(out, sql, 2048);
    free(out);
    free(sql);

    /* patterns that would be quadratic with a naive scanner, 4 MB each: an open IN list,
     * open VALUES rows, many unclosed dollar quotes of a long tag, nested comment openers */
    const char *pieces[] = {"IN (1, ", "VALUES (1), (1, 2), ", "$t12345678901234567890$ ", "/* ", "a IN (?, ?, b"};
    size_t huge = 4u << 20;
    sql = malloc(huge + 64);
    out = malloc(huge * 3 + 2);
    assert_non_null(sql);
    assert_non_null(out);
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        sql[0] = '\0';
        fill(sql, huge + 64, huge, pieces[k]);
        double t0 = now_s();
        size_t n = cmr_sql_normalise(sql, strlen(sql), out, huge * 3 + 2);
        print_message("%zu MB of \"%s\": %.1f ms, %zu bytes out\n", huge >> 20, pieces[k], (now_s() - t0) * 1e3, n);
    }
    free(out);
    free(sql);
}

/* ---- a random mix of statement pieces ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Whether the result has a ' outside its quoted identifiers: a literal's quote that leaked. */
static bool has_bare_quote(const char *s)
{
    char open = 0;
    for (; *s; s++) {
        if (open && *s == open)
            open = 0; /* a doubled quote closes and opens again: the same */
        else if (!open && (*s == '"' || *s == '`'))
            open = *s;
        else if (!open && *s == '\'')
            return true;
    }
    return false;
}

/* Pieces separated by spaces (so that none changes how another is read): a literal's
 * content is always "s3cr3t" and must never come out. */
static void test_random_mix(void **state)
{
    (void)state;
    static const char *const pieces[] = {
        /* names, keywords, punctuation, markers */
        "SELECT", "a", "t1.col_2", "\"x 1\"", "`y``2`", "\"'s3\"", "größe", "\377", "FROM", "WHERE", "IN", "VALUES",
        "AND", "not", "between", "(", ")", ",", "=", "-", "+", "<", "*", "/", ".", "::", "[", "]", "{", "}", "@>", "?",
        "??", "$1", "$", "\t", "\n", "IN (1, 2)", "VALUES (1, 'x'), (2, 'y')",
        /* literals and comments, all hiding the same word */
        "-1", "1", "2.5e-3", "0x1F", "'s3cr3t'", "'it''s3cr3t'", "E's3cr3t\\''", "N's3cr3t'", "$$s3cr3t$$",
        "$q$ s3cr3t $q$", "-- s3cr3t\n", "/* s3cr3t */", "/* /* s3cr3t */ s3cr3t */", "'C:\\s3cr3t\\'"};
    char sql[512], out[3 * sizeof sql + 2];
    for (int round = 0; round < 20000; round++) {
        size_t n = 0, count = 1 + rnd() % 24;
        sql[0] = '\0';
        for (size_t k = 0; k < count; k++) {
            const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
            if (n + strlen(p) + 2 > sizeof sql)
                break;
            n += (size_t)sprintf(sql + n, "%s%s", k ? " " : "", p);
        }
        cmr_sql_normalise(sql, n, out, sizeof out);
        if (strstr(out, "s3cr3t") || has_bare_quote(out))
            fail_msg("a literal leaked:\n  in  \"%s\"\n  out \"%s\"", sql, out);
        if (round % 16 == 0) /* the full checks are slower */
            expect_n(__LINE__, sql, n, out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_literals),
        cmocka_unit_test(test_dollar_quotes),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_signs),
        cmocka_unit_test(test_identifiers),
        cmocka_unit_test(test_comments),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_in_lists),
        cmocka_unit_test(test_values_rows),
        cmocka_unit_test(test_markers_and_case),
        cmocka_unit_test(test_h2_statements),
        cmocka_unit_test(test_postgresql_statements),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_small_buffers),
        cmocka_unit_test(test_cut_input),
        cmocka_unit_test(test_large_inputs),
        cmocka_unit_test(test_random_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
