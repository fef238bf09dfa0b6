/*
 * examples/common/options.h - a command line read off one table: the option
 * parser and the --help lines of the example programs (train_gpt, generate).
 *
 * A program describes each option once, as an option_spec: its name, its
 * kind, the offset of the field it sets in the program's own settings
 * struct and the values it allows. Parsing, range checks, the messages and
 * --help are all read off that entry, so the range --help prints is the
 * range the parser enforces.
 *
 *     typedef struct settings { int64_t steps; const char *mode; uint64_t given; } settings;
 *     static const option_spec specs[] = {
 *         {"steps", "N", "steps to run", OPT_INT64, offsetof(settings, steps),
 *          .ilo = 0, .ihi = 1000},
 *         {"mode", "M", "fast or exact", OPT_CHOICE, offsetof(settings, mode),
 *          .choices = "fast|exact"},
 *     };
 *     static const option_table table = {"prog", specs, 2, 24};
 *
 *     int parsed = options_parse(&table, argc, argv, &s, &s.given);
 *     if (parsed == 1) {
 *         printf("usage: prog [options]\n\n");
 *         options_print_help(&table);
 *     }
 *     if (parsed < 0) return 2; // the message is printed
 *
 * A value is "--name value" or "--name=value"; a flag takes none. Numbers
 * are parsed with overflow checks (strtoll and strtod report ERANGE;
 * nothing is cast down before its range is checked), must be finite and
 * may not start with a blank. Every message goes to stderr as one line,
 * "<program>: --name ...", naming the option, the value and what it allows.
 *
 * What one table cannot say stays in the program: checks between options,
 * and an option whose value is not one field (a store hook, as generate's
 * repeated --prompt).
 */
#ifndef AWL_EXAMPLES_OPTIONS_H
#define AWL_EXAMPLES_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The field's type: const char * (OPT_STRING, OPT_CHOICE), int, int64_t,
 * double or bool (OPT_FLAG). */
typedef enum option_kind {
    OPT_STRING,
    OPT_CHOICE,
    OPT_INT,
    OPT_INT64,
    OPT_DOUBLE,
    OPT_FLAG
} option_kind;

typedef struct option_spec {
    const char *name, *arg, *help; /* arg: the value's name in --help (NULL: a flag) */
    option_kind kind;
    size_t offset; /* of the field in the program's settings (offsetof) */
    /* the program's own grouping, not read here (train_gpt: where the value
     * lives, option_scope) */
    int scope;
    long long ilo, ihi; /* OPT_INT, OPT_INT64: [ilo, ihi] */
    /* OPT_DOUBLE: [dlo, dhi], either end open; dhi INFINITY: no upper bound */
    double dlo, dhi;
    bool dlo_open, dhi_open;
    const char *choices; /* OPT_CHOICE: "a|b|c" */
    /* OPT_STRING: takes the text instead of storing it at offset (a
     * repeatable option). 0, or -1 after printing why. */
    int (*store)(void *settings, const char *text);
} option_spec;

typedef struct option_table {
    const char *program; /* what every message starts with: "<program>: " */
    const option_spec *specs;
    int count;      /* at most 64 where options_parse records `given` */
    int help_width; /* of --help's left column, "--name ARG" */
} option_table;

/* Reads argv[1] to argv[argc - 1] into settings, in order; bit i of *given
 * (unless given is NULL) is set for each specs[i] on the command line.
 * Returns 0, 1 at "--help" or "-h" (what follows is not read), or -1 after
 * printing the usage error. The strings stored point into argv. */
int options_parse(const option_table *t, int argc, char **argv, void *settings, uint64_t *given);

/* Parses text as o's value into settings, with o's range (an OPT_FLAG's
 * text is "true" or "false"). `source`, unless NULL, opens the message
 * ("<source>: --name ...") to say where the text came from. 0, or -1 after
 * printing why. */
int options_parse_value(const option_table *t, const option_spec *o, const char *text,
                        void *settings, const char *source);

/* --help's list on stdout: a line an option, "--name ARG  help [allowed]"
 * (the allowed values for numbers and choices), then --help's own line. */
void options_print_help(const option_table *t);

/* The entry called name, or NULL. */
const option_spec *options_find(const option_table *t, const char *name);

/* Whether the bit of the option called name is set in given. */
bool options_given(const option_table *t, uint64_t given, const char *name);

/* Prints "<program>: <formatted message>" and a newline on stderr, the form
 * of every message here; returns -1, for `return options_complain(...)`. A
 * program's own complain(...) is this with its name. */
int options_complain(const char *program, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
