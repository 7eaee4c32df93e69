"""Counts the WAL frames (pages written) of an admission's two write transactions under three
layouts of the records table: schema 1 (WITHOUT ROWID), schema 2 (rowid table with a UNIQUE
intent) and a WITHOUT ROWID table with bodies in a separate rowid table. Python's sqlite3, WAL,
synchronous=FULL, the same indexes as the ledger; the times it prints depend on the machine,
the frame counts do not.

    python3 docs/bench/sqlite-layout.py
"""
import sqlite3, os, json, random, time, sys
def run(layout, n=600, body=1100):
    p=f'/tmp/effectfence-layout-{layout}.db'
    for s in ('','-wal','-shm'):
        try: os.remove(p+s)
        except FileNotFoundError: pass
    c=sqlite3.connect(p, isolation_level=None)
    c.execute('pragma journal_mode=wal'); c.execute('pragma synchronous=full'); c.execute('pragma wal_autocheckpoint=0')
    c.executescript("""CREATE TABLE meta(key TEXT PRIMARY KEY, value ANY NOT NULL) STRICT, WITHOUT ROWID;
    INSERT INTO meta VALUES('token',0);""")
    if layout=='rowid':
        c.executescript("""CREATE TABLE records(id INTEGER PRIMARY KEY, intent TEXT NOT NULL UNIQUE, state TEXT NOT NULL, expires_at INTEGER, cert_hash TEXT, body BLOB NOT NULL) STRICT;""")
    elif layout=='bodytable':
        c.executescript("""CREATE TABLE records(intent TEXT PRIMARY KEY, state TEXT NOT NULL, expires_at INTEGER, cert_hash TEXT, body_id INTEGER NOT NULL) STRICT, WITHOUT ROWID;
        CREATE TABLE bodies(id INTEGER PRIMARY KEY, body BLOB NOT NULL) STRICT;""")
    else:
        c.executescript("""CREATE TABLE records(intent TEXT PRIMARY KEY, state TEXT NOT NULL, expires_at INTEGER, cert_hash TEXT, body BLOB NOT NULL) STRICT, WITHOUT ROWID;""")
    c.executescript("""CREATE INDEX records_state ON records(state);
    CREATE INDEX records_expires ON records(expires_at) WHERE expires_at IS NOT NULL;
    CREATE INDEX records_cert_hash ON records(cert_hash) WHERE cert_hash IS NOT NULL;""")
    c.execute('pragma wal_checkpoint(truncate)')
    frames=[]
    def wal(): return os.path.getsize(p+'-wal') if os.path.exists(p+'-wal') else 0
    t0=time.time()
    for i in range(n):
        intent='%064x'%random.getrandbits(256)
        claim=os.urandom(body//4).hex().encode()[:body//2]
        done=os.urandom(body//2).hex().encode()[:body]
        w0=wal()
        c.execute('BEGIN IMMEDIATE')
        if layout=='bodytable':
            c.execute('SELECT b.body FROM records r JOIN bodies b ON b.id=r.body_id WHERE r.intent=?',(intent,)).fetchall()
            c.execute("UPDATE meta SET value=value+1 WHERE key='token'")
            bid=c.execute('INSERT INTO bodies(body) VALUES(?)',(claim,)).lastrowid
            c.execute('INSERT INTO records(intent,state,expires_at,cert_hash,body_id) VALUES(?,?,?,?,?)',(intent,'in_flight',None,None,bid))
        else:
            c.execute('SELECT body FROM records WHERE intent=?',(intent,)).fetchall()
            c.execute("UPDATE meta SET value=value+1 WHERE key='token'")
            c.execute('INSERT INTO records(intent,state,expires_at,cert_hash,body) VALUES(?,?,?,?,?) ON CONFLICT(intent) DO UPDATE SET state=excluded.state, expires_at=excluded.expires_at, cert_hash=excluded.cert_hash, body=excluded.body',(intent,'in_flight',None,None,claim))
        c.execute('COMMIT')
        w1=wal()
        c.execute('BEGIN IMMEDIATE')
        h='%064x'%random.getrandbits(256)
        if layout=='bodytable':
            bid=c.execute('SELECT body_id FROM records WHERE intent=?',(intent,)).fetchone()[0]
            c.execute('SELECT body FROM bodies WHERE id=?',(bid,)).fetchall()
            c.execute('UPDATE bodies SET body=? WHERE id=?',(done,bid))
            c.execute('UPDATE records SET state=?,expires_at=?,cert_hash=? WHERE intent=?',('done',i,h,intent))
        else:
            c.execute('SELECT body FROM records WHERE intent=?',(intent,)).fetchall()
            c.execute('INSERT INTO records(intent,state,expires_at,cert_hash,body) VALUES(?,?,?,?,?) ON CONFLICT(intent) DO UPDATE SET state=excluded.state, expires_at=excluded.expires_at, cert_hash=excluded.cert_hash, body=excluded.body',(intent,'done',i,h,done))
        c.execute("UPDATE meta SET value=value+1 WHERE key='token'")
        c.execute('COMMIT')
        w2=wal()
        frames.append(((w1-w0)/4120,(w2-w1)/4120))
    el=time.time()-t0
    a=sum(f[0] for f in frames[100:])/len(frames[100:]); b=sum(f[1] for f in frames[100:])/len(frames[100:])
    print(f'{layout:10s} body={body}: frames per admission {a:.2f}, per commit {b:.2f}; {el/n*1e3:.2f} ms/op')
for body in (1100, 4096):
    for l in ('withoutrowid','rowid','bodytable'):
        run(l, body=body)
