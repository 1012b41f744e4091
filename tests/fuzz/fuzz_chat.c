/*
 * fuzz_chat: the native Qwen3 chat template, api_chat_render(), on
 * conversations built from the input, and api_chat_split_reasoning() on
 * every message text.
 *
 * Input: byte 0 holds the options (bit 0: generation prompt, bit 1:
 * thinking on); the rest is split at NUL bytes into messages. A message's
 * first byte picks its role (low two bits: system, user, assistant, or the
 * message text itself as the role) and whether it carries a
 * reasoning_content (bit 2: the text after its first 0x01 byte).
 * Checked: rendering fails exactly when a role is not system, user,
 * assistant or tool (or there is no message), with an error naming the message and
 * a message that is valid UTF-8 when the role was; the text rendered is
 * NUL-free, starts with "<|im_start|>", ends with the generation prompt when
 * asked, and holds every user and system text; split ranges lie inside
 * the text and reasoning comes before content.
 */
#include <string.h>

#include "api/chat_template.h"
#include "tests/fuzz/fuzz.h"

#define MAX_MSGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static void check_split(const char *text)
{
    size_t len = strlen(text);
    api_chat_split sp;
    api_chat_split_reasoning(text, len, &sp);
    FUZZ_CHECK(sp.reasoning_off <= len && sp.reasoning_len <= len - sp.reasoning_off);
    FUZZ_CHECK(sp.content_off <= len && sp.content_len <= len - sp.content_off);
    if (sp.has_reasoning)
        FUZZ_CHECK(sp.reasoning_off + sp.reasoning_len <= sp.content_off);
    else
        FUZZ_CHECK(sp.content_off == 0 && sp.content_len == len && sp.reasoning_len == 0);
}

static int has_bytes(const char *hay, size_t n, const char *needle)
{
    size_t nl = strlen(needle);
    return nl == 0 || memmem(hay, n, needle, nl) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    api_chat_opts opts = {.add_generation_prompt = data[0] & 1, .enable_thinking = (data[0] >> 1) & 1};
    /* One NUL-terminated copy of the rest; messages point into it. */
    char *buf = malloc(size);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    api_chat_msg msgs[MAX_MSGS];
    size_t n = 0;
    bool roles_ok = true, roles_utf8 = true;
    static const char *const roles[] = {"system", "user", "assistant"};
    for (char *p = buf; p < buf + size - 1 && n < MAX_MSGS;) {
        size_t len = strlen(p);
        char *next = p + len + 1;
        if (len == 0) {
            p = next;
            continue;
        }
        unsigned sel = (unsigned char)p[0];
        char *text = p + 1;
        api_chat_msg *m = &msgs[n++];
        *m = (api_chat_msg){0};
        if (sel & 4) {
            char *cut = strchr(text, '\1');
            if (cut) {
                *cut = '\0';
                m->reasoning_content = cut + 1;
            }
        }
        m->content = text;
        if ((sel & 3) == 3) {
            m->role = text;
            roles_ok = roles_ok && (!strcmp(text, "system") || !strcmp(text, "user") || !strcmp(text, "assistant") ||
                                    !strcmp(text, "tool"));
            roles_utf8 = roles_utf8 && fuzz_utf8_valid(text, strlen(text));
        } else {
            m->role = roles[sel & 3];
        }
        p = next;
    }

    char *out = NULL;
    size_t out_len = 0;
    api_chat_error err;
    int rc = api_chat_render(n ? msgs : NULL, n, &opts, &out, &out_len, &err);
    if (rc == API_CHAT_ENOMEM)
        goto done;
    if (n == 0 || !roles_ok) {
        FUZZ_CHECK(rc == (n == 0 ? API_CHAT_EEMPTY : API_CHAT_EROLE) && !out);
        FUZZ_CHECK(api_chat_http_status(rc) == 400);
        FUZZ_CHECK(memchr(err.message, '\0', sizeof err.message) && memchr(err.param, '\0', sizeof err.param));
        FUZZ_CHECK(!strncmp(err.param, "messages", 8));
        if (roles_utf8)
            FUZZ_CHECK(fuzz_utf8_valid(err.message, strlen(err.message)));
        goto done;
    }
    FUZZ_CHECK(rc == 0 && out);
    FUZZ_CHECK(strlen(out) == out_len);
    static const char head[] = "<|im_start|>";
    FUZZ_CHECK(out_len >= sizeof head - 1 && !memcmp(out, head, sizeof head - 1));
    if (opts.add_generation_prompt) {
        const char *tail = opts.enable_thinking ? "<|im_start|>assistant\n"
                                                : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        size_t tl = strlen(tail);
        FUZZ_CHECK(out_len >= tl && !memcmp(out + out_len - tl, tail, tl));
    }
    for (size_t i = 0; i < n; i++) {
        /* System and user texts are copied as they are. */
        if (strcmp(msgs[i].role, "assistant") != 0)
            FUZZ_CHECK(has_bytes(out, out_len, msgs[i].content));
        check_split(msgs[i].content);
    }
done:
    free(out);
    free(buf);
    return 0;
}
