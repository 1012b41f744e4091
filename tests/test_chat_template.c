/*
 * test_chat_template: api/chat_template.c.
 *
 * Expected renders are assembled here from the template's rules (one
 * "<|im_start|>{role}\n{content}<|im_end|>\n" block per message, then the
 * generation prompt); the exact comparison with the real Jinja template is
 * the shell test tests/chat_template.sh.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "tests/check_main.h"

#define OPEN "<|im_start|>"
#define CLOSE "<|im_end|>\n"
#define EMPTY_THINK "<think>\n\n</think>\n\n"

/* One block as the template's rule writes it. */
static char *block(char *dst, const char *role, const char *content)
{
    return dst + sprintf(dst, OPEN "%s\n%s" CLOSE, role, content);
}

static char *render_ok(const api_chat_msg *m, size_t n, const api_chat_opts *o)
{
    char *out = NULL;
    size_t len = 0;
    api_chat_error err;
    int rc = api_chat_render(m, n, o, &out, &len, &err);
    ck_assert_msg(rc == 0, "render failed: %s", err.message);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(len, strlen(out));
    return out;
}

START_TEST(roles_and_generation_prompt)
{
    const api_chat_msg m[] = {
        {"system", "You are terse.", NULL, NULL, 0},
        {"user", "Hi", NULL, NULL, 0},
        {"assistant", "Hello.", NULL, NULL, 0},
        {"system", "Now be verbose.", NULL, NULL, 0},
        {"user", "Why?", NULL, NULL, 0},
    };
    api_chat_opts o;
    api_chat_opts_default(&o);
    char want[1024], *p = want;
    for (size_t i = 0; i < 5; i++)
        p = block(p, m[i].role, m[i].content);
    strcpy(p, OPEN "assistant\n");
    char *got = render_ok(m, 5, &o);
    ck_assert_str_eq(got, want);
    free(got);

    /* Thinking off appends the empty think block to the prompt only. */
    o.enable_thinking = false;
    strcat(want, EMPTY_THINK);
    got = render_ok(m, 5, &o);
    ck_assert_str_eq(got, want);
    free(got);

    /* No generation prompt: the messages alone. */
    o.add_generation_prompt = false;
    *p = '\0';
    got = render_ok(m, 5, &o);
    ck_assert_str_eq(got, want);
    free(got);

    /* NULL options are the defaults. */
    got = render_ok(m + 1, 1, NULL);
    p = block(want, "user", "Hi");
    strcpy(p, OPEN "assistant\n");
    ck_assert_str_eq(got, want);
    free(got);
}
END_TEST

START_TEST(assistant_reasoning_history)
{
    /* The earlier turn loses its reasoning, the turn after the last user
     * query keeps it, the final message always has a think block. */
    const api_chat_msg m[] = {
        {"user", "Q1", NULL, NULL, 0},
        {"assistant", "<think>\nR1\n</think>\n\nA1", NULL, NULL, 0},
        {"user", "Q2", NULL, NULL, 0},
        {"assistant", "<think>\nR2\n</think>\n\nA2", NULL, NULL, 0},
        {"assistant", "A3 without reasoning", NULL, NULL, 0},
    };
    char want[1024], *p = want;
    p = block(p, "user", "Q1");
    p = block(p, "assistant", "A1");
    p = block(p, "user", "Q2");
    p = block(p, "assistant", "<think>\nR2\n</think>\n\nA2");
    p = block(p, "assistant", "<think>\n\n</think>\n\nA3 without reasoning");
    strcpy(p, OPEN "assistant\n");
    char *got = render_ok(m, 5, NULL);
    ck_assert_str_eq(got, want);
    free(got);

    /* reasoning_content, when given, is used instead of a split. */
    const api_chat_msg r[] = {
        {"user", "Q", NULL, NULL, 0},
        {"assistant", "\n\nA", "\nthought\n", NULL, 0},
    };
    p = block(want, "user", "Q");
    p = block(p, "assistant", "<think>\nthought\n</think>\n\nA");
    *p = '\0';
    api_chat_opts o = {.add_generation_prompt = false, .enable_thinking = true};
    got = render_ok(r, 2, &o);
    ck_assert_str_eq(got, want);
    free(got);
}
END_TEST

START_TEST(bad_messages_named)
{
    const api_chat_msg m[] = {
        {"system", "s", NULL, NULL, 0},
        {"user", "u", NULL, NULL, 0},
        {"function", "t", NULL, NULL, 0},
    };
    char *out = (char *)1;
    api_chat_error err;
    ck_assert_int_eq(api_chat_render(m, 3, NULL, &out, NULL, &err), API_CHAT_EROLE);
    ck_assert_ptr_null(out);
    ck_assert_int_eq(err.index, 2);
    ck_assert_str_eq(err.param, "messages[2].role");
    ck_assert_ptr_nonnull(strstr(err.message, "messages[2].role"));
    ck_assert_ptr_nonnull(strstr(err.message, "'function'"));
    ck_assert_int_eq(api_chat_http_status(API_CHAT_EROLE), 400);
    ck_assert_str_eq(api_chat_error_type(API_CHAT_EROLE), "invalid_request_error");

    const api_chat_msg no_content[] = {{"user", "u", NULL, NULL, 0}, {"assistant", NULL, NULL, NULL, 0}};
    ck_assert_int_eq(api_chat_render(no_content, 2, NULL, &out, NULL, &err), API_CHAT_ECONTENT);
    ck_assert_str_eq(err.param, "messages[1].content");
    ck_assert_ptr_nonnull(strstr(err.message, "must be a string"));

    const api_chat_msg no_role[] = {{NULL, "u", NULL, NULL, 0}};
    ck_assert_int_eq(api_chat_render(no_role, 1, NULL, &out, NULL, &err), API_CHAT_EROLE);
    ck_assert_str_eq(err.param, "messages[0].role");

    /* Roles are case-sensitive, as in the template; long roles are cut on a
     * character boundary in the message. */
    const api_chat_msg upper[] = {{"User", "u", NULL, NULL, 0}};
    ck_assert_int_eq(api_chat_render(upper, 1, NULL, &out, NULL, &err), API_CHAT_EROLE);
    const api_chat_msg longrole[] = {
        {"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
         "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9x\xc3\xa9\xc3\xa9",
         "u", NULL, NULL, 0}};
    ck_assert_int_eq(api_chat_render(longrole, 1, NULL, &out, NULL, &err), API_CHAT_EROLE);
    ck_assert_ptr_nonnull(strstr(err.message, "x'"));
    ck_assert_ptr_null(strstr(err.message, "x\xc3"));

    ck_assert_int_eq(api_chat_render(m, 0, NULL, &out, NULL, &err), API_CHAT_EEMPTY);
    ck_assert_str_eq(err.param, "messages");
    ck_assert_int_eq(api_chat_render(NULL, 2, NULL, &out, NULL, NULL), API_CHAT_EEMPTY);
}
END_TEST

static void check_split(const char *text, int has, const char *reasoning, const char *content)
{
    api_chat_split sp;
    api_chat_split_reasoning(text, strlen(text), &sp);
    ck_assert_int_eq(sp.has_reasoning, has);
    ck_assert_uint_eq(sp.reasoning_len, strlen(reasoning));
    ck_assert_msg(memcmp(text + sp.reasoning_off, reasoning, sp.reasoning_len) == 0,
                  "reasoning of '%s'", text);
    ck_assert_uint_eq(sp.content_len, strlen(content));
    ck_assert_msg(memcmp(text + sp.content_off, content, sp.content_len) == 0, "content of '%s'",
                  text);
}

START_TEST(thinking_split)
{
    check_split("<think>\nLet me see.\n</think>\n\nThe answer.", 1, "Let me see.", "The answer.");
    check_split("plain answer", 0, "", "plain answer");
    check_split("", 0, "", "");
    check_split("<think>\n\n</think>\n\nOK", 1, "", "OK");
    check_split("<think>\nstill thinking", 1, "still thinking", "");
    check_split("no open tag\n</think>\nrest", 1, "no open tag", "rest");
    /* The template's rules: reasoning before the first </think>, after the
     * last <think> before it; content after the last </think>. */
    check_split("<think>a<think>b\n</think>mid</think>\n\nend", 1, "b", "end");
    check_split("answer mentioning <think> later", 0, "", "answer mentioning <think> later");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("chat_template");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, roles_and_generation_prompt);
    tcase_add_test(tc, assistant_reasoning_history);
    tcase_add_test(tc, bad_messages_named);
    tcase_add_test(tc, thinking_split);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
