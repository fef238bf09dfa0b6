/*
 * examples/common/options.c - the table-driven option parser (options.h).
 *
 * Every text a user sees is built here from the table entry, so the allowed
 * values in a range error and in --help are one string, made by one
 * function (allowed_text).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

int options_complain(const char *program, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* "an integer in [1, 65536]", "a finite number > 0", "one of char, bpe", ... */
static void allowed_text(const option_spec *o, char *buf, size_t size)
{
    switch (o->kind) {
    case OPT_INT:
    case OPT_INT64: snprintf(buf, size, "an integer in [%lld, %lld]", o->ilo, o->ihi); break;
    case OPT_DOUBLE:
        if (isinf(o->dhi))
            snprintf(buf, size, "a finite number %s %g", o->dlo_open ? ">" : ">=", o->dlo);
        else
            snprintf(buf, size, "a number in %s%g, %g%s", o->dlo_open ? "(" : "[", o->dlo, o->dhi,
                     o->dhi_open ? ")" : "]");
        break;
    case OPT_CHOICE: {
        size_t n = (size_t)snprintf(buf, size, "one of ");
        for (const char *c = o->choices; *c && n + 2 < size; c++) {
            if (*c == '|') {
                n += (size_t)snprintf(buf + n, size - n, ", ");
            } else {
                buf[n++] = *c;
                buf[n] = '\0';
            }
        }
        break;
    }
    default: snprintf(buf, size, "any text"); break;
    }
}

void options_print_help(const option_table *t)
{
    for (int i = 0; i < t->count; i++) {
        const option_spec *o = &t->specs[i];
        char left[64], allowed[160];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        printf("  %-*s %s", t->help_width, left, o->help);
        if (o->kind != OPT_STRING && o->kind != OPT_FLAG) {
            allowed_text(o, allowed, sizeof allowed);
            printf(" [%s]", allowed);
        }
        printf("\n");
    }
    printf("  %-*s %s\n", t->help_width, "--help", "show this help");
}

const option_spec *options_find(const option_table *t, const char *name)
{
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->specs[i].name, name) == 0) return &t->specs[i];
    return NULL;
}

bool options_given(const option_table *t, uint64_t given, const char *name)
{
    const option_spec *o = options_find(t, name);
    return o && (given >> (o - t->specs) & 1);
}

static bool in_choices(const char *choices, const char *text)
{
    size_t n = strlen(text);
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        if (len == n && strncmp(c, text, n) == 0) return true;
        c += len + (c[len] == '|');
    }
    return false;
}

/* strtoll and strtod skip leading blanks; an option's value may not have them */
static bool starts_blank(const char *text) { return text[0] == ' ' || text[0] == '\t'; }

int options_parse_value(const option_table *t, const option_spec *o, const char *text,
                        void *settings, const char *source)
{
    char allowed[160], prefix[600] = "";
    allowed_text(o, allowed, sizeof allowed);
    if (source) snprintf(prefix, sizeof prefix, "%s: ", source);
    void *field = (char *)settings + o->offset;
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_STRING:
        if (o->store) return o->store(settings, text);
        *(const char **)field = text;
        return 0;
    case OPT_CHOICE:
        if (!in_choices(o->choices, text))
            return options_complain(t->program, "%s--%s '%s' is not allowed (allowed: %s)", prefix,
                                    o->name, text, allowed);
        *(const char **)field = text;
        return 0;
    case OPT_INT:
    case OPT_INT64: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || starts_blank(text))
            return options_complain(t->program, "%s--%s '%s' is not an integer (allowed: %s)",
                                    prefix, o->name, text, allowed);
        if (errno == ERANGE || v < o->ilo || v > o->ihi)
            return options_complain(t->program, "%s--%s %s is out of range (allowed: %s)", prefix,
                                    o->name, text, allowed);
        if (o->kind == OPT_INT)
            *(int *)field = (int)v;
        else
            *(int64_t *)field = v;
        return 0;
    }
    case OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || starts_blank(text))
            return options_complain(t->program, "%s--%s '%s' is not a number (allowed: %s)", prefix,
                                    o->name, text, allowed);
        bool below = o->dlo_open ? !(v > o->dlo) : !(v >= o->dlo);
        bool above = o->dhi_open ? !(v < o->dhi) : !(v <= o->dhi);
        if (!isfinite(v) || below || above)
            return options_complain(t->program, "%s--%s %s is out of range (allowed: %s)", prefix,
                                    o->name, text, allowed);
        *(double *)field = v;
        return 0;
    }
    case OPT_FLAG:
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0)
            return options_complain(t->program, "%s--%s '%s' must be true or false", prefix,
                                    o->name, text);
        *(bool *)field = strcmp(text, "true") == 0;
        return 0;
    }
    return -1;
}

/* The entry arg names ("--name" or "--name=value"), and the value after
 * '=' in *value (NULL without one). NULL when arg is no option. */
static const option_spec *option_of(const option_table *t, const char *arg, const char **value)
{
    *value = NULL;
    if (strncmp(arg, "--", 2) != 0) return NULL;
    size_t len = strcspn(arg + 2, "=");
    if (arg[2 + len] == '=') *value = arg + 3 + len;
    for (int k = 0; k < t->count; k++)
        if (strlen(t->specs[k].name) == len && strncmp(t->specs[k].name, arg + 2, len) == 0)
            return &t->specs[k];
    return NULL;
}

int options_parse(const option_table *t, int argc, char **argv, void *settings, uint64_t *given)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *value = NULL;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return 1;
        const option_spec *o = option_of(t, arg, &value);
        if (!o) return options_complain(t->program, "unknown option '%s' (see --help)", arg);
        if (given) *given |= 1ull << (o - t->specs);
        if (o->kind == OPT_FLAG) {
            if (value) return options_complain(t->program, "--%s takes no value", o->name);
            *(bool *)((char *)settings + o->offset) = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) return options_complain(t->program, "--%s needs a value", o->name);
            value = argv[++i];
        }
        if (options_parse_value(t, o, value, settings, NULL) < 0) return -1;
    }
    return 0;
}
