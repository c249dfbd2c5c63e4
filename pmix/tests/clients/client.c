/* A PMIx client for gang-pmix's tests, started with Server::fork_env.
 *
 *   client put     Init, Put "gang.key" = "rank-R-of-NS" (global), Commit,
 *                  Fence with data collection over the namespace, Get every
 *                  peer's key and check it, Finalize.
 *   client abort S Init, then PMIx_Abort(S) (the whole namespace).
 *   client publish rank 0 publishes "gang.svc-NS" = "port-NS"; after a
 *                  fence every rank looks it up and checks it; Finalize.
 *   client init    Init only (exit 0 if PMIx_Init succeeded, 2 if not).
 *   client big     Publish a 2 MiB value: must be refused (exit 0 if it is).
 *   client huge    Put a 20 MiB value and fence: the fence must fail (exit 0
 *                  if it does).
 *
 * Prints "ok" and exits 0 when every check passed; otherwise says what
 * failed on stderr and exits 1 (2 for a failed PMIx_Init).
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pmix_proc_t me;

static void die(const char *what, pmix_status_t rc)
{
    fprintf(stderr, "client %s:%u: %s: %s\n", me.nspace, me.rank, what, PMIx_Error_string(rc));
    exit(1);
}

static uint32_t job_size(void)
{
    pmix_proc_t wild;
    pmix_value_t *v = NULL;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_NSPACE(wild.nspace, me.nspace);
    wild.rank = PMIX_RANK_WILDCARD;
    pmix_status_t rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
    if (rc != PMIX_SUCCESS)
        die("Get job size", rc);
    uint32_t n = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    return n;
}

static void fence(void)
{
    pmix_info_t info;
    bool yes = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
    if (rc != PMIX_SUCCESS)
        die("Fence", rc);
}

static int put(void)
{
    char val[600];
    pmix_value_t v;
    snprintf(val, sizeof val, "rank-%u-of-%s", me.rank, me.nspace);
    PMIX_VALUE_LOAD(&v, val, PMIX_STRING);
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, "gang.key", &v);
    if (rc != PMIX_SUCCESS)
        die("Put", rc);
    if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
        die("Commit", rc);
    fence();
    uint32_t n = job_size();
    for (uint32_t r = 0; r < n; r++) {
        pmix_proc_t peer;
        pmix_value_t *got = NULL;
        PMIX_PROC_CONSTRUCT(&peer);
        PMIX_LOAD_NSPACE(peer.nspace, me.nspace);
        peer.rank = r;
        if ((rc = PMIx_Get(&peer, "gang.key", NULL, 0, &got)) != PMIX_SUCCESS)
            die("Get of a peer's key", rc);
        snprintf(val, sizeof val, "rank-%u-of-%s", r, me.nspace);
        if (got->type != PMIX_STRING || strcmp(got->data.string, val) != 0) {
            fprintf(stderr, "client %s:%u: rank %u's key is %s, not %s\n", me.nspace, me.rank, r,
                    got->type == PMIX_STRING ? got->data.string : "(not a string)", val);
            exit(1);
        }
        PMIX_VALUE_RELEASE(got);
    }
    return 0;
}

static int publish(void)
{
    char key[300], want[300];
    snprintf(key, sizeof key, "gang.svc-%s", me.nspace);
    snprintf(want, sizeof want, "port-%s", me.nspace);
    pmix_status_t rc;
    if (me.rank == 0) {
        pmix_info_t info;
        PMIX_INFO_LOAD(&info, key, want, PMIX_STRING);
        if ((rc = PMIx_Publish(&info, 1)) != PMIX_SUCCESS)
            die("Publish", rc);
    }
    fence();
    pmix_pdata_t pd;
    PMIX_PDATA_CONSTRUCT(&pd);
    PMIX_LOAD_KEY(pd.key, key);
    if ((rc = PMIx_Lookup(&pd, 1, NULL, 0)) != PMIX_SUCCESS)
        die("Lookup", rc);
    if (pd.value.type != PMIX_STRING || strcmp(pd.value.data.string, want) != 0 || pd.proc.rank != 0) {
        fprintf(stderr, "client %s:%u: looked up %s from rank %u\n", me.nspace, me.rank,
                pd.value.type == PMIX_STRING ? pd.value.data.string : "(not a string)", pd.proc.rank);
        exit(1);
    }
    pmix_pdata_t missing;
    PMIX_PDATA_CONSTRUCT(&missing);
    PMIX_LOAD_KEY(missing.key, "gang.never-published");
    if ((rc = PMIx_Lookup(&missing, 1, NULL, 0)) == PMIX_SUCCESS) {
        fprintf(stderr, "client %s:%u: looked up a key nobody published\n", me.nspace, me.rank);
        exit(1);
    }
    fence();
    return 0;
}

static int big(void)
{
    size_t n = 2u << 20;
    char *v = malloc(n + 1);
    memset(v, 'x', n);
    v[n] = 0;
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, "gang.big", v, PMIX_STRING);
    pmix_status_t rc = PMIx_Publish(&info, 1);
    if (rc == PMIX_SUCCESS) {
        fprintf(stderr, "client %s:%u: a 2 MiB value was published\n", me.nspace, me.rank);
        exit(1);
    }
    PMIX_INFO_DESTRUCT(&info);
    free(v);
    return 0;
}

static int huge(void)
{
    pmix_byte_object_t bo;
    bo.size = 20u << 20;
    bo.bytes = calloc(1, bo.size);
    pmix_value_t v;
    PMIX_VALUE_LOAD(&v, &bo, PMIX_BYTE_OBJECT);
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, "gang.huge", &v);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Commit();
    if (rc == PMIX_SUCCESS) {
        pmix_info_t info;
        bool yes = true;
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
        rc = PMIx_Fence(NULL, 0, &info, 1);
    }
    if (rc == PMIX_SUCCESS) {
        fprintf(stderr, "client %s:%u: a fence carrying 20 MiB went through\n", me.nspace, me.rank);
        exit(1);
    }
    fprintf(stderr, "client %s:%u: refused: %s\n", me.nspace, me.rank, PMIx_Error_string(rc));
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "put";
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "client: PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 2;
    }
    if (strcmp(mode, "abort") == 0) {
        int status = argc > 2 ? atoi(argv[2]) : 1;
        rc = PMIx_Abort(status, "gang-pmix test abort", NULL, 0);
        fprintf(stderr, "client: PMIx_Abort returned %s\n", PMIx_Error_string(rc));
        return 3;
    }
    if (strcmp(mode, "put") == 0)
        put();
    else if (strcmp(mode, "publish") == 0)
        publish();
    else if (strcmp(mode, "big") == 0)
        big();
    else if (strcmp(mode, "huge") == 0) {
        huge();
        printf("ok %s:%u\n", me.nspace, me.rank);
        return 0; /* the server may be gone from this client's point of view */
    }
    else if (strcmp(mode, "init") != 0) {
        fprintf(stderr, "client: unknown mode %s\n", mode);
        return 1;
    }
    if ((rc = PMIx_Finalize(NULL, 0)) != PMIX_SUCCESS)
        die("Finalize", rc);
    printf("ok %s:%u\n", me.nspace, me.rank);
    return 0;
}
