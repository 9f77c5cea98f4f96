"""An independent reader of our Atom feeds: Python's `feedparser`, as feed readers use it.

usage:
  feed_referee.py URL FILE [URL FILE ...]
      Parses each FILE (a feed fetched from its URL, which relative links resolve
      against) and prints {"URL": {"bozo": bool, "bozo_exception": str, "version": str,
      "title": str, "id": str, "links": [{"rel", "type", "href"}], "entries": [{"id",
      "title", "link", "links", "published", "updated", "author", "tags", "summary"}]}}.
"""

import json
import sys

import feedparser


def read(url, path):
    with open(path, "rb") as f:
        data = f.read()
    d = feedparser.parse(data, response_headers={"content-location": url, "content-type": "application/atom+xml; charset=utf-8"})
    return {
        "bozo": bool(d.bozo),
        "bozo_exception": str(d.get("bozo_exception", "")),
        "version": d.version,
        "title": d.feed.get("title", ""),
        "id": d.feed.get("id", ""),
        "updated": d.feed.get("updated", ""),
        "links": [{"rel": l.get("rel"), "type": l.get("type"), "href": l.get("href")} for l in d.feed.get("links", [])],
        "entries": [
            {
                "id": e.get("id", ""),
                "title": e.get("title", ""),
                "link": e.get("link", ""),
                "links": [{"rel": l.get("rel"), "type": l.get("type"), "href": l.get("href")} for l in e.get("links", [])],
                "published": e.get("published", ""),
                "updated": e.get("updated", ""),
                "author": e.get("author", ""),
                "tags": [t.get("term") for t in e.get("tags", [])],
                "summary": e.get("summary", ""),
            }
            for e in d.entries
        ],
    }


def main():
    args = sys.argv[1:]
    pairs = zip(args[0::2], args[1::2])
    print(json.dumps({url: read(url, path) for url, path in pairs}))


if __name__ == "__main__":
    main()
