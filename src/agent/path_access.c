/* Which component of a socket's path refuses this process, and what fixes it (path_access.h).
 * Owns nothing: it reads the file system and the caller's ids. */
#define _GNU_SOURCE
#include "agent/path_access.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eerl/error.h"

#define GROUPS_MAX 256

static int in_group(gid_t gid)
{
    gid_t groups[GROUPS_MAX];
    int n = getgroups(GROUPS_MAX, groups), i;

    if (getegid() == gid)
        return 1;
    for (i = 0; i < n; i++)
        if (groups[i] == gid)
            return 1;
    return 0;
}

/* Fills r for path, refused for a search (directory) or a write (socket). */
static int refused(const char *path, int is_socket, struct eerl__path_refusal *r)
{
    struct stat st;
    unsigned bit = is_socket ? S_IWGRP : S_IXGRP;

    if (stat(path, &st) != 0)
        return EERL_ENOENT;
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->is_socket = is_socket;
    r->mode = (unsigned)st.st_mode & 07777;
    r->uid = (unsigned)st.st_uid;
    r->gid = (unsigned)st.st_gid;
    r->me = (unsigned)geteuid();
    r->group_helps = st.st_uid != geteuid() && !in_group(st.st_gid) && (st.st_mode & bit);
    return 0;
}

int eerl__path_refusal(const char *path, struct eerl__path_refusal *ret)
{
    char dir[PATH_MAX];
    size_t n = strlen(path), i;

    memset(ret, 0, sizeof(*ret));
    if (n == 0 || n >= sizeof(dir))
        return EERL_ENOENT;
    memcpy(dir, path, n + 1);
    for (i = 0; i < n; i++) {
        if (dir[i] != '/')
            continue;
        dir[i] = '\0';
        if (faccessat(AT_FDCWD, i ? dir : "/", X_OK, AT_EACCESS) != 0 && errno == EACCES)
            return refused(i ? dir : "/", 0, ret);
        dir[i] = '/';
    }
    if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0 && errno == EACCES)
        return refused(path, 1, ret);
    return EERL_ENOENT;
}

static void user_name(unsigned uid, char *buf, size_t len)
{
    struct passwd pw, *p = NULL;
    char tmp[1024];

    if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof(tmp), &p) == 0 && p)
        snprintf(buf, len, "%s", p->pw_name);
    else
        snprintf(buf, len, "%u", uid);
}

static void group_name(unsigned gid, char *buf, size_t len)
{
    struct group gr, *g = NULL;
    char tmp[1024];

    if (getgrgid_r((gid_t)gid, &gr, tmp, sizeof(tmp), &g) == 0 && g)
        snprintf(buf, len, "%s", g->gr_name);
    else
        snprintf(buf, len, "%u", gid);
}

void eerl__path_refusal_say(const struct eerl__path_refusal *r, char *buf, size_t len)
{
    char owner[64], group[64], me[64];

    user_name(r->uid, owner, sizeof(owner));
    group_name(r->gid, group, sizeof(group));
    user_name(r->me, me, sizeof(me));
    snprintf(buf, len, "the %s %s (mode %04o, owner %s, group %s) does not let uid %u (%s) %s",
             r->is_socket ? "socket" : "directory", r->path, r->mode, owner, group, r->me, me,
             r->is_socket ? "write to it" : "through");
}

void eerl__path_refusal_fix(const struct eerl__path_refusal *r, char *buf, size_t len)
{
    char group[64];

    group_name(r->gid, group, sizeof(group));
    if (r->group_helps)
        snprintf(buf, len,
                 "ask the node's admin to add uid %u to the group '%s', which %s lets through "
                 "(then log in again); or run as root",
                 r->me, group, r->path);
    else if (r->is_socket)
        snprintf(buf, len,
                 "the socket lets only its owner write: start eerld with --socket-mode 0660 "
                 "--socket-group eerl and add uid %u to that group; or run as root",
                 r->me);
    else
        snprintf(buf, len,
                 "joining a group does not help while %s has mode %04o: put eerld's socket "
                 "(eerld --socket) in a directory with mode 0755, or 0750 with group eerl and "
                 "uid %u in that group (chmod 0755 %s does it for this one); or run as root",
                 r->path, r->mode, r->me, r->path);
}
