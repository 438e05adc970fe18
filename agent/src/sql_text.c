/*
 * sql_text.c - the SQL text normaliser (sql_text.h).
 *
 * What it is for. A JDBC probe captures the SQL text of each statement it sees (up to
 * CMR_RING_NODE_DATA_MAX bytes, so possibly cut mid-statement or mid-character). The
 * agent's publisher thread passes that text through cmr_sql_normalise() before the
 * db.statement attribute goes on the wire: by default literal values, which may be
 * passwords or personal data, never leave the JVM. The same pass makes statements that
 * differ only in their values, their spacing or their comments read the same, so the
 * CMR can show them and group them as one statement.
 *
 * How it works. One pass over the input, token by token, writing into the caller's
 * buffer; no allocation. A token is a word, a quoted identifier, a literal (masked), a
 * parameter marker `?` or one punctuation byte. Between tokens, whitespace and comments
 * are "separators". Two keywords look ahead a bounded way (IN and VALUES, below); every
 * input byte is read a small constant number of times, so the time is linear.
 * The result does not depend on out_cap other than by where it is cut: a short buffer
 * gets a prefix of what a long one gets.
 *
 * Rules, in the order the lexer tries them at the start of a token:
 *
 *   - Separators: space, tab, CR, LF, and every other ASCII control byte (NUL, DEL...,
 *     which mean nothing in SQL outside literals); `-- ...` to the end of the line (LF
 *     or CR); C-style block comments (slash-star to star-slash), nested as PostgreSQL
 *     nests them (a dialect that does not nest loses the text after an inner
 *     slash-star, which is safer than leaking a comment's rest), an unterminated one
 *     running to the end. Comments
 *     may carry data, so they are dropped. A run of separators between two tokens
 *     becomes one space; at the start or the end it becomes nothing.
 *   - String literals become `?`: '...' with '' as the escaped quote and a backslash
 *     taken literally (standard SQL, PostgreSQL's standard_conforming_strings);
 *     E'...' (any case) with backslash escapes as well; the prefixed forms N'...',
 *     X'...', B'...' and U&'...' (the prefix goes with the literal). An unterminated
 *     literal is masked to the end of the input: its content never leaks.
 *   - Dollar quotes $$...$$ and $tag$...$tag$ (tag: a letter, `_` or non-ASCII byte,
 *     then those or digits) become `?`, unterminated ones to the end. A tag longer
 *     than 64 bytes (PostgreSQL stops identifiers at 63) masks the rest of the input
 *     without searching for the closing tag, which could take quadratic time.
 *     `$` and digits is a PostgreSQL parameter ($1) and is kept; any other `$` is
 *     punctuation (inside a word, `$` is part of the word: a$b).
 *   - Double-quoted identifiers "..." and backquoted `...` (a doubled quote inside
 *     escapes it) are kept as they are, an unterminated one to the end.
 *   - Numbers become `?`: digits, an optional fraction, an optional exponent (e, an
 *     optional sign, digits), then any letters, digits or `_` directly after them, so
 *     0x1F, 1e-3, 10L and 1_000 are one literal. A `.` followed by a digit starts a
 *     number where a value is expected (below); elsewhere it is punctuation (t.5 is
 *     "t." then a number).
 *     A `-` or `+` directly followed by a digit (or by `.` and a digit) is the number's
 *     sign where a value is expected: at the start, after punctuation other than `)`,
 *     `]` and `}` (so after `(`, `,`, `=`, `<`, `>` and every operator), and after the
 *     keywords AND, OR, NOT, BETWEEN, CASE, WHEN, THEN, ELSE, SELECT, WHERE, HAVING,
 *     LIMIT, OFFSET, RETURN. After an operand (a word, identifier, literal, `?` or a
 *     closing bracket) it is an operator: `x = -5` is `x = ?`, `a-1` is `a-?`,
 *     `1-1` is `?-?`, `x = - 5` is `x = - ?` (the sign is not directly before the digit).
 *     Digits inside a word (t1, col_2) or a quoted identifier ("x1") are not literals.
 *   - Words: a letter, `_` or a byte >= 0x80, then those, digits or `$`. Copied as they
 *     are: keywords keep their case, so the result reads like the statement.
 *   - `?` (a JDBC parameter marker) stays `?`.
 *   - Any other byte is one punctuation token, copied.
 *
 * Lists of values collapse, so that statements differing only in how many values they
 * carry group together:
 *   - IN (v, v, ...) becomes IN (?) when every v is a literal or `?`, whatever the
 *     spacing inside the parentheses (IN(1,2) is IN(?)). A list with anything else in
 *     it (a column, a function call, a subquery, a row) is kept, masked item by item.
 *   - VALUES (v, ...), (v, ...), ... keeps its first row (as it was spaced) and drops
 *     the rows right after it that have the same number of values, each a literal or
 *     `?`. A row that differs stops the collapse; it and what follows are kept.
 *     Other parenthesised lists of `?` (function arguments, a single VALUES row) keep
 *     their length: they say something about the statement's shape.
 *
 * Output: valid UTF-8 with no control characters. Bytes >= 0x80 outside literals
 * (non-ASCII identifiers) are copied when they form valid UTF-8 (RFC 3629: no
 * overlong forms, no surrogates); each byte of an invalid or cut sequence becomes U+FFFD,
 * as does a control byte inside a quoted identifier. U+FFFD rather than `?`, because a
 * `?` would read as a parameter marker, and rather than nothing, because dropping a byte
 * could make two different names one. The output is cut at out_cap - 1 bytes on a
 * character boundary; a space left at the end by the cut is dropped.
 *
 * Known limits (masking more than needed never leaks; these may mask too little):
 *   - MySQL by default reads a backslash in '...' as an escape ('it\'s'). This file
 *     follows standard SQL, where that literal ends after the backslash: the rest of
 *     the MySQL literal would be read as SQL text. MySQL's "..." strings (without
 *     ANSI_QUOTES) are kept as identifiers, and its `#` comments are not comments here.
 *   - The normaliser sees one statement's text and no dialect; it is not a parser.
 */
#include "sql_text.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define DOLLAR_TAG_MAX 64 /* bytes of a dollar-quote tag's name searched for */

typedef enum { TOK_END, TOK_WORD, TOK_QUOTED, TOK_MASKED, TOK_PARAM, TOK_PUNCT } tok_kind_t;

typedef struct {
    tok_kind_t kind;
    size_t start, end; /* the token's bytes in the input */
} tok_t;

typedef struct {
    const unsigned char *p;
    size_t n;
} src_t;

typedef struct {
    char *out;
    size_t room;  /* bytes that may still be written before the NUL */
    size_t len;   /* bytes written */
    bool full;    /* a character did not fit: nothing more is written */
    bool started; /* a token was written: a separator now becomes a space */
} sink_t;

/* ---- bytes ---- */

static bool is_separator_byte(unsigned char c)
{
    return c <= 0x20 || c == 0x7f;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_ascii_letter(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_word_start(unsigned char c)
{
    return is_ascii_letter(c) || c == '_' || c >= 0x80;
}

static bool is_word_byte(unsigned char c)
{
    return is_word_start(c) || is_digit(c) || c == '$';
}

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

/* The byte at i, or 0 past the end: lookahead without a bounds test at each use. */
static unsigned char at(const src_t *s, size_t i)
{
    return i < s->n ? s->p[i] : 0;
}

static bool equals_ci(const src_t *s, size_t start, size_t end, const char *word)
{
    size_t len = strlen(word);
    if (end - start != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (lower(s->p[start + i]) != (unsigned char)word[i])
            return false;
    return true;
}

/* ---- separators: whitespace, control bytes, comments ---- */

static size_t skip_line_comment(const src_t *s, size_t i)
{
    while (i < s->n && s->p[i] != '\n' && s->p[i] != '\r')
        i++;
    return i;
}

/* i is at the opening slash. Nested like PostgreSQL's; unterminated: to the end. */
static size_t skip_block_comment(const src_t *s, size_t i)
{
    size_t depth = 0;
    while (i < s->n) {
        if (s->p[i] == '/' && at(s, i + 1) == '*') {
            depth++;
            i += 2;
        } else if (s->p[i] == '*' && at(s, i + 1) == '/') {
            i += 2;
            if (--depth == 0)
                return i;
        } else {
            i++;
        }
    }
    return s->n;
}

static size_t skip_separators(const src_t *s, size_t i)
{
    while (i < s->n) {
        unsigned char c = s->p[i];
        if (is_separator_byte(c))
            i++;
        else if (c == '-' && at(s, i + 1) == '-')
            i = skip_line_comment(s, i);
        else if (c == '/' && at(s, i + 1) == '*')
            i = skip_block_comment(s, i);
        else
            break;
    }
    return i;
}

/* ---- literals and quoted identifiers ---- */

/* i is at the opening quote q; a doubled q escapes it. Returns the end (unterminated: the input's). */
static size_t scan_quoted(const src_t *s, size_t i, unsigned char q)
{
    for (i++; i < s->n; i++) {
        if (s->p[i] != q)
            continue;
        if (at(s, i + 1) != q) /* (at() is 0 past the end, and q is not 0) */
            return i + 1;
        i++; /* the doubled quote */
    }
    return s->n;
}

/* E'...': as scan_quoted, and a backslash escapes the byte after it. */
static size_t scan_escaped_string(const src_t *s, size_t i)
{
    for (i++; i < s->n; i++) {
        if (s->p[i] == '\\') {
            i++; /* the escaped byte (past the end: the loop ends) */
        } else if (s->p[i] == '\'') {
            if (at(s, i + 1) != '\'')
                return i + 1;
            i++;
        }
    }
    return s->n;
}

/* i is at a `$` that starts a token. Sets *end and returns true for a dollar quote
 * ($$ or $tag$, to the closing tag or the end of the input). */
static bool scan_dollar_quote(const src_t *s, size_t i, size_t *end)
{
    size_t t = i + 1;
    if (t < s->n && is_word_start(s->p[t]))
        while (t < s->n && is_word_byte(s->p[t]) && s->p[t] != '$')
            t++;
    if (at(s, t) != '$')
        return false;
    size_t tag_len = t + 1 - i; /* with both dollars */
    if (tag_len - 2 > DOLLAR_TAG_MAX) {
        *end = s->n;
        return true;
    }
    for (size_t j = t + 1; j + tag_len <= s->n; j++)
        if (s->p[j] == '$' && memcmp(s->p + j, s->p + i, tag_len) == 0) {
            *end = j + tag_len;
            return true;
        }
    *end = s->n;
    return true;
}

/* i is at the first digit, or at the `.` of a leading fraction. */
static size_t scan_number(const src_t *s, size_t i)
{
    while (is_digit(at(s, i)))
        i++;
    if (at(s, i) == '.')
        for (i++; is_digit(at(s, i));)
            i++;
    if (lower(at(s, i)) == 'e') {
        size_t e = i + 1;
        if (at(s, e) == '+' || at(s, e) == '-')
            e++;
        if (is_digit(at(s, e)))
            for (i = e; is_digit(at(s, i));)
                i++;
    }
    /* 0x1F, 10L, 1_000: what sticks to a number is part of it */
    while (i < s->n && (is_digit(s->p[i]) || is_ascii_letter(s->p[i]) || s->p[i] == '_'))
        i++;
    return i;
}

static bool starts_fraction(const src_t *s, size_t i)
{
    return at(s, i) == '.' && is_digit(at(s, i + 1));
}

/* Where a value is expected, "-5", "+.5" and ".5" start a number. */
static bool starts_number(const src_t *s, size_t i, bool value_expected)
{
    unsigned char c = s->p[i];
    if (is_digit(c))
        return true;
    if (!value_expected)
        return false;
    if (c == '-' || c == '+')
        return is_digit(at(s, i + 1)) || starts_fraction(s, i + 1);
    return starts_fraction(s, i);
}

/* ---- tokens ---- */

/* A word right before a quote that makes a prefixed string literal (E'', N'', X'', B'',
 * U&''): the end of the literal, or 0 when the word is no prefix. */
static size_t scan_prefixed_string(const src_t *s, size_t start, size_t end)
{
    if (at(s, end) == '\'') {
        if (equals_ci(s, start, end, "e"))
            return scan_escaped_string(s, end);
        if (equals_ci(s, start, end, "n") || equals_ci(s, start, end, "x") || equals_ci(s, start, end, "b"))
            return scan_quoted(s, end, '\'');
    }
    if (equals_ci(s, start, end, "u") && at(s, end) == '&' && at(s, end + 1) == '\'')
        return scan_quoted(s, end + 1, '\'');
    return 0;
}

static tok_t word_token(const src_t *s, size_t i)
{
    size_t end = i;
    while (end < s->n && is_word_byte(s->p[end]))
        end++;
    size_t literal_end = scan_prefixed_string(s, i, end);
    if (literal_end)
        return (tok_t){TOK_MASKED, i, literal_end};
    return (tok_t){TOK_WORD, i, end};
}

/* `$`: a dollar quote (masked), a PostgreSQL parameter $1 (kept, a word), or punctuation. */
static tok_t dollar_token(const src_t *s, size_t i)
{
    size_t end;
    if (scan_dollar_quote(s, i, &end))
        return (tok_t){TOK_MASKED, i, end};
    if (is_digit(at(s, i + 1))) {
        for (end = i + 1; is_digit(at(s, end));)
            end++;
        return (tok_t){TOK_WORD, i, end};
    }
    return (tok_t){TOK_PUNCT, i, i + 1};
}

/* The token at i (after the separators), given whether a value is expected there. */
static tok_t next_token(const src_t *s, size_t i, bool value_expected)
{
    if (i >= s->n)
        return (tok_t){TOK_END, i, i};
    unsigned char c = s->p[i];
    if (c == '\'')
        return (tok_t){TOK_MASKED, i, scan_quoted(s, i, '\'')};
    if (c == '"' || c == '`')
        return (tok_t){TOK_QUOTED, i, scan_quoted(s, i, c)};
    if (c == '$')
        return dollar_token(s, i);
    if (starts_number(s, i, value_expected))
        return (tok_t){TOK_MASKED, i, scan_number(s, is_digit(c) || c == '.' ? i : i + 1)};
    if (is_word_start(c))
        return word_token(s, i);
    if (c == '?')
        return (tok_t){TOK_PARAM, i, i + 1};
    return (tok_t){TOK_PUNCT, i, i + 1};
}

static bool is_punct(const src_t *s, tok_t t, unsigned char c)
{
    return t.kind == TOK_PUNCT && s->p[t.start] == c;
}

/* Keywords after which a sign belongs to the number that follows (SELECT -1, BETWEEN -5). */
static bool is_value_keyword(const src_t *s, tok_t t)
{
    static const char *const words[] = {"and",  "or",     "not",   "between", "case",  "when",   "then",
                                        "else", "select", "where", "having",  "limit", "offset", "return"};
    if (t.end - t.start > 7) /* the longest one: a cheap exit for long names */
        return false;
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (equals_ci(s, t.start, t.end, words[k]))
            return true;
    return false;
}

/* Whether a value (rather than an operator) may come after t. */
static bool value_expected_after(const src_t *s, tok_t t)
{
    switch (t.kind) {
    case TOK_WORD: return is_value_keyword(s, t);
    case TOK_PUNCT: return !is_punct(s, t, ')') && !is_punct(s, t, ']') && !is_punct(s, t, '}');
    default: return false;
    }
}

/* ---- lists of values ---- */

/* i is right after a `(`. When what follows is literals and `?` separated by commas up
 * to a `)`, returns the end of the `)` and sets *items; otherwise 0. Reads no further
 * than the first token that does not fit. */
static size_t scan_masked_list(const src_t *s, size_t i, size_t *items)
{
    size_t count = 0;
    for (;;) {
        tok_t v = next_token(s, skip_separators(s, i), true);
        if (v.kind != TOK_MASKED && v.kind != TOK_PARAM)
            return 0;
        count++;
        tok_t sep = next_token(s, skip_separators(s, v.end), false);
        if (is_punct(s, sep, ')')) {
            *items = count;
            return sep.end;
        }
        if (!is_punct(s, sep, ','))
            return 0;
        i = sep.end;
    }
}

/* i is right after a VALUES row of `items` masked values: the end of the rows of the same
 * shape that follow it (", (?, ?)" each), or i when there are none. */
static size_t skip_same_rows(const src_t *s, size_t i, size_t items)
{
    for (;;) {
        tok_t comma = next_token(s, skip_separators(s, i), false);
        if (!is_punct(s, comma, ','))
            return i;
        tok_t open = next_token(s, skip_separators(s, comma.end), true);
        if (!is_punct(s, open, '('))
            return i;
        size_t row_items = 0, end = scan_masked_list(s, open.end, &row_items);
        if (!end || row_items != items)
            return i;
        i = end;
    }
}

/* ---- output ---- */

/* The length of the valid UTF-8 character at p (n bytes available), or 0 (RFC 3629). */
static size_t utf8_char_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xbf;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0; /* overlong */
    else if (c == 0xed)
        hi = 0x9f; /* surrogates */
    else if (c == 0xf0)
        lo = 0x90; /* overlong */
    else if (c == 0xf4)
        hi = 0x8f; /* past U+10FFFF */
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (p[k] < 0x80 || p[k] > 0xbf)
            return 0;
    return len;
}

/* Writes one whole character, or nothing and no more once one does not fit. */
static void put_char(sink_t *w, const void *bytes, size_t len)
{
    if (w->full || len > w->room) {
        w->full = true;
        return;
    }
    memcpy(w->out + w->len, bytes, len);
    w->len += len;
    w->room -= len;
}

static void put_byte(sink_t *w, char c)
{
    put_char(w, &c, 1);
}

static void put_ascii(sink_t *w, const char *text)
{
    for (; *text; text++)
        put_byte(w, *text);
}

static void put_separator(sink_t *w, bool separated)
{
    if (separated && w->started)
        put_byte(w, ' ');
    w->started = true;
}

/* Copies text as valid UTF-8 without control characters (each bad byte: U+FFFD). */
static void put_text(sink_t *w, const unsigned char *p, size_t n)
{
    static const char replacement[] = "\xef\xbf\xbd";
    for (size_t i = 0; i < n && !w->full;) {
        size_t len = utf8_char_len(p + i, n - i);
        if (len == 0 || (len == 1 && is_separator_byte(p[i]) && p[i] != ' ')) {
            put_char(w, replacement, 3);
            i++;
        } else {
            put_char(w, p + i, len);
            i += len;
        }
    }
}

static void put_token(sink_t *w, const src_t *s, tok_t t, bool separated)
{
    put_separator(w, separated);
    switch (t.kind) {
    case TOK_MASKED:
    case TOK_PARAM: put_byte(w, '?'); break;
    case TOK_PUNCT: put_byte(w, (char)s->p[t.start]); break;
    default: put_text(w, s->p + t.start, t.end - t.start); break;
    }
}

/* ---- the pass ---- */

typedef enum { AFTER_OTHER, AFTER_IN, AFTER_VALUES } after_t; /* the keyword a list may follow */

typedef struct {
    src_t s;
    sink_t w;
    size_t i;                  /* where the next separators or token start */
    size_t skip_from, skip_to; /* VALUES rows dropped: the input from skip_from to skip_to */
    bool value_expected;       /* a sign here belongs to a number */
    after_t after;
} pass_t;

static after_t keyword_of(const src_t *s, tok_t t)
{
    if (t.kind != TOK_WORD)
        return AFTER_OTHER;
    if (equals_ci(s, t.start, t.end, "in"))
        return AFTER_IN;
    if (equals_ci(s, t.start, t.end, "values"))
        return AFTER_VALUES;
    return AFTER_OTHER;
}

/* The `(` after IN or VALUES: true when it opened a list of masked values that was
 * written whole (IN), and the pass moved past it. */
static bool collapse_list(pass_t *ps, tok_t open, bool separated)
{
    size_t items = 0, end = scan_masked_list(&ps->s, open.end, &items);
    if (!end)
        return false;
    if (ps->after == AFTER_VALUES) { /* this row is written; the same ones after it are not */
        ps->skip_from = end;
        ps->skip_to = skip_same_rows(&ps->s, end, items);
        return false;
    }
    put_separator(&ps->w, separated);
    put_ascii(&ps->w, "(?)");
    ps->i = end;
    ps->value_expected = false;
    ps->after = AFTER_OTHER;
    return true;
}

/* Writes the next token (and the space before it). false at the end of the input. */
static bool step(pass_t *ps)
{
    if (ps->i == ps->skip_from)
        ps->i = ps->skip_to;
    size_t start = skip_separators(&ps->s, ps->i);
    tok_t t = next_token(&ps->s, start, ps->value_expected);
    if (t.kind == TOK_END)
        return false;
    bool separated = start > ps->i;
    if (ps->after != AFTER_OTHER && is_punct(&ps->s, t, '(') && collapse_list(ps, t, separated))
        return true;
    put_token(&ps->w, &ps->s, t, separated);
    ps->i = t.end;
    ps->value_expected = value_expected_after(&ps->s, t);
    ps->after = keyword_of(&ps->s, t);
    return true;
}

size_t cmr_sql_normalise(const char *in, size_t in_len, char *out, size_t out_cap)
{
    if (out_cap == 0)
        return 0;
    pass_t ps = {.s = {(const unsigned char *)in, in ? in_len : 0},
                 .w = {out, out_cap - 1, 0, false, false},
                 .skip_from = SIZE_MAX,
                 .value_expected = true,
                 .after = AFTER_OTHER};
    while (!ps.w.full && step(&ps))
        ;
    if (ps.w.full && ps.w.len > 0 && out[ps.w.len - 1] == ' ')
        ps.w.len--; /* cut right after a space */
    out[ps.w.len] = '\0';
    return ps.w.len;
}
