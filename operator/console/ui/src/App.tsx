import { useEffect, useState } from 'react';
import {
  Content,
  Header,
  HeaderGlobalAction,
  HeaderGlobalBar,
  HeaderMenuItem,
  HeaderName,
  HeaderNavigation,
  InlineNotification,
  Loading,
  SkipToContent,
  Theme,
} from '@carbon/react';
import { Asleep, Light, Translate } from '@carbon/icons-react';
import { fetchSnapshot, isStale, type Snapshot, type SnapshotResult } from './api';
import { useI18n, type MessageKey } from './i18n';
import { ManagementProvider, ManagementHeaderAction } from './management';
import { age } from './format';
import { ThemeContext } from './components';
import Overview from './pages/Overview';
import Brokers from './pages/Brokers';
import Topics from './pages/Topics';
import StoragePage from './pages/Storage';
import Operations from './pages/Operations';
import Configuration from './pages/Configuration';

export const PAGES = [
  'overview',
  'brokers',
  'topics',
  'storage',
  'operations',
  'configuration',
] as const;
export type Page = (typeof PAGES)[number];

const THEME_KEY = 'rustqueue-theme';
type ThemeName = 'g10' | 'g100';
const POLL_MS = 2000;

function pageFromHash(): Page {
  const h = window.location.hash.replace(/^#\/?/, '');
  return (PAGES as readonly string[]).includes(h) ? (h as Page) : 'overview';
}

function useHashPage(): Page {
  const [page, setPage] = useState<Page>(pageFromHash);
  useEffect(() => {
    const on = () => setPage(pageFromHash());
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return page;
}

/** Polls the snapshot every 2 s; keeps the last good one when a poll fails. */
function useSnapshot(): { last: Snapshot | null; result: SnapshotResult | null; now: number } {
  const [result, setResult] = useState<SnapshotResult | null>(null);
  const [last, setLast] = useState<Snapshot | null>(null);
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    let alive = true;
    const tick = async () => {
      const r = await fetchSnapshot();
      if (!alive) return;
      setResult(r);
      setNow(Date.now());
      if (r.state === 'ok') setLast(r.snapshot);
    };
    void tick();
    const id = window.setInterval(() => void tick(), POLL_MS);
    return () => {
      alive = false;
      window.clearInterval(id);
    };
  }, []);
  return { last, result, now };
}

function useTheme(): [ThemeName, () => void] {
  const [theme, setTheme] = useState<ThemeName>(() =>
    localStorage.getItem(THEME_KEY) === 'g100' ? 'g100' : 'g10',
  );
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    document.body.style.background = theme === 'g100' ? '#161616' : '#f4f4f4';
  }, [theme]);
  const toggle = () => {
    const next: ThemeName = theme === 'g10' ? 'g100' : 'g10';
    localStorage.setItem(THEME_KEY, next);
    setTheme(next);
  };
  return [theme, toggle];
}

function StatusBanner({
  result,
  last,
  now,
}: {
  result: SnapshotResult | null;
  last: Snapshot | null;
  now: number;
}) {
  const { t } = useI18n();
  if (!last) {
    if (result?.state === 'error') {
      return (
        <InlineNotification
          className="rq-banner"
          kind="error"
          lowContrast
          hideCloseButton
          title={t('banner.unreachable')}
          subtitle={result.message}
        />
      );
    }
    return null;
  }
  if (result?.state === 'error' || isStale(last, now)) {
    return (
      <InlineNotification
        className="rq-banner"
        kind="warning"
        lowContrast
        hideCloseButton
        title={t('banner.stale')}
        subtitle={t('banner.staleDetail', { age: age(last.collected_at_ms, now) })}
      />
    );
  }
  if (!last.complete) {
    return (
      <InlineNotification
        className="rq-banner"
        kind="warning"
        lowContrast
        hideCloseButton
        title={t('banner.incomplete')}
        subtitle={last.errors.join('; ') || t('banner.incompleteDetail')}
      />
    );
  }
  return null;
}

function PageBody({ page, snapshot, now }: { page: Page; snapshot: Snapshot; now: number }) {
  switch (page) {
    case 'overview':
      return <Overview s={snapshot} now={now} />;
    case 'brokers':
      return <Brokers s={snapshot} />;
    case 'topics':
      return <Topics s={snapshot} />;
    case 'storage':
      return <StoragePage s={snapshot} />;
    case 'operations':
      return <Operations s={snapshot} />;
    case 'configuration':
      return <Configuration s={snapshot} />;
  }
}

export default function App() {
  const page = useHashPage();
  const { last, result, now } = useSnapshot();
  const [theme, toggleTheme] = useTheme();
  const { t, lang, setLang } = useI18n();
  useEffect(() => {
    document.title = `${t(`nav.${page}` as MessageKey)} · ${t('app.title')}`;
  }, [page, t]);
  return (
    <ManagementProvider>
      <ThemeContext.Provider value={theme}>
      <Theme theme={theme}>
        <Header aria-label={t('app.title')}>
          <SkipToContent>{t('app.skip')}</SkipToContent>
          <HeaderName href="#/overview" prefix="RustQueue">
            {t('app.console')}
          </HeaderName>
          <HeaderNavigation aria-label={t('app.title')}>
            {PAGES.map((p) => (
              <HeaderMenuItem key={p} href={`#/${p}`} isActive={p === page}>
                {t(`nav.${p}` as MessageKey)}
              </HeaderMenuItem>
            ))}
          </HeaderNavigation>
          <HeaderGlobalBar>
            <ManagementHeaderAction />
            <HeaderGlobalAction
              aria-label={lang === 'en' ? '中文' : 'English'}
              data-testid="language-toggle"
              onClick={() => setLang(lang === 'en' ? 'zh' : 'en')}
            >
              <Translate size={20} />
            </HeaderGlobalAction>
            <HeaderGlobalAction
              aria-label={theme === 'g10' ? t('theme.dark') : t('theme.light')}
              data-testid="theme-toggle"
              onClick={toggleTheme}
            >
              {theme === 'g10' ? <Asleep size={20} /> : <Light size={20} />}
            </HeaderGlobalAction>
          </HeaderGlobalBar>
        </Header>
        <Content id="main-content" data-page={page}>
          <StatusBanner result={result} last={last} now={now} />
          {last ? (
            <PageBody page={page} snapshot={last} now={now} />
          ) : (
            <div className="rq-page" data-testid="collecting">
              <Loading withOverlay={false} small description={t('banner.collecting')} />
              <p>{t('banner.collecting')}</p>
            </div>
          )}
        </Content>
      </Theme>
      </ThemeContext.Provider>
    </ManagementProvider>
  );
}
