/*
 * This file contains weft's one FIFO: an intrusive singly linked queue of
 * structs that carry their own link, with a tail pointer and a length.
 * WEFT__QUEUE(name, type, link) defines the queue type `name` of `type`
 * linked through its `link` field, and these functions (all O(1) but
 * remove, which scans):
 *
 *   name##_push(q, e)       append e
 *   name##_push_front(q, e) put e first
 *   name##_pop(q)           take the first, or NULL
 *   name##_splice(dst, src) append all of src to dst; src becomes empty
 *   name##_remove(q, e)     take e out wherever it is; false when absent
 *
 * WEFT__LIST(name, type, next, prev) defines the same with two links and
 * no length (a public struct may keep just its two ends: sync/sync.h), for
 * queues whose elements leave from the middle (a waiter that times out, a
 * job taken back): push, pop and remove are all O(1) there, and remove
 * needs an element that is on the list.
 *
 * A zeroed queue is empty. No locking: the owner's lock guards the queue.
 */
#ifndef WEFT_BASE_QUEUE_H
#define WEFT_BASE_QUEUE_H

/* Each queue or list defines all of its functions; a user may need only some (clang warns of the rest). */

#include <stdbool.h>
#include <stddef.h>

#define WEFT__QUEUE(name, type, link)                                                                        \
  typedef struct name {                                                                                      \
    type *head;                                                                                              \
    type *tail;                                                                                              \
    size_t len;                                                                                              \
  } name;                                                                                                    \
                                                                                                             \
  static inline __attribute__((unused)) void name##_push(name *q, type *e) {                                 \
    e->link = NULL;                                                                                          \
    if (q->tail)                                                                                             \
      q->tail->link = e;                                                                                     \
    else                                                                                                     \
      q->head = e;                                                                                           \
    q->tail = e;                                                                                             \
    q->len++;                                                                                                \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) void name##_push_front(name *q, type *e) {                           \
    e->link = q->head;                                                                                       \
    q->head = e;                                                                                             \
    if (!q->tail) q->tail = e;                                                                               \
    q->len++;                                                                                                \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) type *name##_pop(name *q) {                                          \
    type *e = q->head;                                                                                       \
    if (e) {                                                                                                 \
      q->head = e->link;                                                                                     \
      if (!q->head) q->tail = NULL;                                                                          \
      q->len--;                                                                                              \
      e->link = NULL;                                                                                        \
    }                                                                                                        \
    return e;                                                                                                \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) void name##_splice(name *dst, name *src) {                           \
    if (!src->head) return;                                                                                  \
    if (dst->tail)                                                                                           \
      dst->tail->link = src->head;                                                                           \
    else                                                                                                     \
      dst->head = src->head;                                                                                 \
    dst->tail = src->tail;                                                                                   \
    dst->len += src->len;                                                                                    \
    src->head = src->tail = NULL;                                                                            \
    src->len = 0;                                                                                            \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) bool name##_remove(name *q, type *e) {                               \
    type *prev = NULL;                                                                                       \
    for (type *x = q->head; x; prev = x, x = x->link) {                                                      \
      if (x != e) continue;                                                                                  \
      if (prev)                                                                                              \
        prev->link = e->link;                                                                                \
      else                                                                                                   \
        q->head = e->link;                                                                                   \
      if (q->tail == e) q->tail = prev;                                                                      \
      q->len--;                                                                                              \
      e->link = NULL;                                                                                        \
      return true;                                                                                           \
    }                                                                                                        \
    return false;                                                                                            \
  }                                                                                                          \
  struct name##_end_ /* swallows the semicolon after the macro */

#define WEFT__LIST(name, type, next, prev)                                                                   \
  typedef struct name {                                                                                      \
    type *head;                                                                                              \
    type *tail;                                                                                              \
  } name;                                                                                                    \
                                                                                                             \
  static inline __attribute__((unused)) void name##_push(name *l, type *e) {                                 \
    e->next = NULL;                                                                                          \
    e->prev = l->tail;                                                                                       \
    if (l->tail)                                                                                             \
      l->tail->next = e;                                                                                     \
    else                                                                                                     \
      l->head = e;                                                                                           \
    l->tail = e;                                                                                             \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) void name##_remove(name *l, type *e) {                               \
    if (e->prev)                                                                                             \
      e->prev->next = e->next;                                                                               \
    else                                                                                                     \
      l->head = e->next;                                                                                     \
    if (e->next)                                                                                             \
      e->next->prev = e->prev;                                                                               \
    else                                                                                                     \
      l->tail = e->prev;                                                                                     \
    e->next = e->prev = NULL;                                                                                \
  }                                                                                                          \
                                                                                                             \
  static inline __attribute__((unused)) type *name##_pop(name *l) {                                          \
    type *e = l->head;                                                                                       \
    if (e) name##_remove(l, e);                                                                              \
    return e;                                                                                                \
  }                                                                                                          \
  struct name##_end_ /* swallows the semicolon after the macro */

#endif /* WEFT_BASE_QUEUE_H */
