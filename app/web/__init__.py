"""Record once, replay anywhere: a talk's replies and races as plain data (recording.py), written out as one
self-contained web page that replays them in any browser, with no models and no network (page.py).

Qt-free: a recording is built from the app's ReplyTrace records, and the page is plain HTML, CSS and JavaScript.
"""
