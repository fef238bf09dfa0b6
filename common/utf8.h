/*
 * common/utf8.h - well-formed UTF-8, as RFC 3629 defines it.
 *
 * Shared by the safetensors header parser (names and metadata must be
 * UTF-8) and the corpus reader (a corpus must be UTF-8 text). Well-formed
 * means: no stray continuation bytes, no overlong forms, no surrogates
 * (U+D800..U+DFFF) and nothing past U+10FFFF.
 */
#ifndef AWL_COMMON_UTF8_H
#define AWL_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the UTF-8 sequence at s[0..n) (n >= 1), or 0 when it is
 * malformed. */
static inline size_t awl_utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0; /* continuation byte, overlong lead (C0, C1) or past F4 */
    }
    if (len > n) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
    return len;
}

/* The offset of the first malformed sequence in s[0..n), or n when all of
 * it is well-formed. */
static inline size_t awl_utf8_first_invalid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = awl_utf8_sequence(u + i, n - i);
        if (!len) return i;
        i += len;
    }
    return n;
}

#endif
